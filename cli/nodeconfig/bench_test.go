package nodeconfig

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	benchFiles = 10000
	benchUnits = 500
)

// benchConfig is an Ignition config of benchFiles files (about 200 bytes
// each, as data URLs) and benchUnits units with a drop-in each; changed
// gives file 4242 other content.
func benchConfig(changed bool) []byte {
	var b strings.Builder
	b.WriteString(`{"ignition":{"version":"3.4.0"},"storage":{"files":[`)
	for i := range benchFiles {
		if i > 0 {
			b.WriteByte(',')
		}
		content := fmt.Sprintf("# generated configuration %d\n", i) + strings.Repeat(fmt.Sprintf("option.%d = value-%d\n", i, i), 8)
		if changed && i == 4242 {
			content += "changed = true\n"
		}
		fmt.Fprintf(&b, `{"path":"/etc/bench/%d/file-%d.conf","mode":420,"contents":{"source":"data:,%s"}}`, i%100, i, escape(content))
	}
	b.WriteString(`]},"systemd":{"units":[`)
	for i := range benchUnits {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"bench-%d.service","enabled":true,"contents":"[Unit]\nDescription=bench %d\n[Service]\nExecStart=/usr/bin/bench %d\n[Install]\nWantedBy=multi-user.target\n",`+
			`"dropins":[{"name":"10-env.conf","contents":"[Service]\nEnvironment=N=%d\n"}]}`, i, i, i, i)
	}
	b.WriteString(`]}}`)
	return []byte(b.String())
}

func escape(s string) string {
	// Percent-encode what is not unreserved (RFC 2396), as data URLs are
	// written.
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// BenchmarkDiff compares two configurations of 10,000 files and 500
// units that differ in one file, read once.
func BenchmarkDiff(b *testing.B) {
	old, err := ReadIgnition("old.ign", benchConfig(false))
	require.NoError(b, err)
	newer, err := ReadIgnition("new.ign", benchConfig(true))
	require.NoError(b, err)
	require.Len(b, old.Files, benchFiles)
	require.Len(b, old.Units, benchUnits)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ch := Diff(old, newer)
		if len(ch.Files) != 1 || len(ch.Units) != 0 {
			b.Fatalf("changes: %v", ch.List())
		}
	}
}

// BenchmarkDiffIgnition parses the two Ignition configs (about 3 MB each)
// and compares them, each iteration.
func BenchmarkDiffIgnition(b *testing.B) {
	oldRaw, newRaw := benchConfig(false), benchConfig(true)
	b.SetBytes(int64(len(oldRaw) + len(newRaw)))
	b.ReportAllocs()
	for b.Loop() {
		old, err := ReadIgnition("old.ign", oldRaw)
		if err != nil {
			b.Fatal(err)
		}
		newer, err := ReadIgnition("new.ign", newRaw)
		if err != nil {
			b.Fatal(err)
		}
		if ch := Diff(old, newer); len(ch.Files) != 1 {
			b.Fatalf("changes: %v", ch.List())
		}
	}
}
