// Package version holds the build's version, stamped with -ldflags.
package version

// Version is set at build time: -X lull.dev/lull/pkg/version.Version=...
var Version = "dev"
