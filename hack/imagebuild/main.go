// Command imagebuild assembles a reproducible single-layer OCI image from
// files on disk with go-containerregistry — no daemon, no base image, no
// registry — and writes it as one tar that is both an OCI image layout and
// a docker-archive (see WriteArchive). hack/images.sh drives it:
//
//	imagebuild --ref lull.dev/lull-scheduler:v0.1.0 \
//	  --output _output/images/lull-scheduler-v0.1.0.tar \
//	  --digest-file _output/images/lull-scheduler-v0.1.0.digest \
//	  --platform linux/amd64 --created "$SOURCE_DATE_EPOCH" \
//	  --file _output/images/.work/lull-scheduler:/usr/local/bin/lull-scheduler:0755 \
//	  --dir /tmp:01777 --user 65532:65532 \
//	  --entrypoint /usr/local/bin/lull-scheduler \
//	  --env PATH=/usr/local/bin:/usr/bin:/bin \
//	  --label org.opencontainers.image.title=lull-scheduler
//
// The same flags and file contents always give the same digest and the same
// archive bytes. It prints one line: ref, digest, layer and archive sizes.
//
//	imagebuild verify ARCHIVE...
//
// reads archives through both views (docker-archive and OCI layout) and
// checks that they are valid and agree (see VerifyArchive).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	run := run
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "verify" {
		run, args = verifyMain, args[1:]
	}
	if len(args) > 0 && args[0] == "index" {
		run, args = indexMain, args[1:]
	}
	if err := run(args, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

// buildFlags are the flags of an image build (`imagebuild --ref ...`).
type buildFlags struct {
	files, dirs, entrypoint, cmd, env, labels listFlag

	ref, output, digestFile, platform, created, user, workdir, createdBy string
}

func run(args []string, stdout io.Writer) error {
	f, err := parseBuildFlags(args)
	if err != nil {
		return err
	}
	tag, err := parseTag(f.ref)
	if err != nil {
		return err
	}
	spec, err := f.spec()
	if err != nil {
		return err
	}
	img, err := Build(spec)
	if err != nil {
		return err
	}
	if err := WriteArchiveFile(f.output, img, tag, spec.Created); err != nil {
		return fmt.Errorf("writing %s: %w", f.output, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if f.digestFile != "" {
		if err := os.WriteFile(f.digestFile, []byte(digest.String()+"\n"), 0o644); err != nil {
			return err
		}
	}
	compressed, uncompressed, err := layerSizes(img)
	if err != nil {
		return err
	}
	st, err := os.Stat(f.output)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ref=%s digest=%s layer_compressed=%d layer_uncompressed=%d archive=%d\n",
		tag.String(), digest, compressed, uncompressed, st.Size())
	return nil
}

// parseBuildFlags parses an image build's command line; --ref and
// --output are required.
func parseBuildFlags(args []string) (*buildFlags, error) {
	var f buildFlags
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	fs.StringVar(&f.ref, "ref", "", "image reference with an explicit tag, e.g. lull.dev/lull-scheduler:v0.1.0 (never latest)")
	fs.StringVar(&f.output, "output", "", "archive to write (OCI layout + docker-archive tar)")
	fs.StringVar(&f.digestFile, "digest-file", "", "also write the manifest digest here")
	fs.StringVar(&f.platform, "platform", "", "os/arch[/variant], e.g. linux/amd64")
	fs.StringVar(&f.created, "created", os.Getenv("SOURCE_DATE_EPOCH"), "creation time and file mtimes, Unix seconds (default $SOURCE_DATE_EPOCH)")
	fs.StringVar(&f.user, "user", "", "user[:group] the entrypoint runs as")
	fs.StringVar(&f.workdir, "workdir", "", "working directory")
	fs.StringVar(&f.createdBy, "created-by", "", "history created_by text")
	fs.Var(&f.files, "file", "SRC:DEST[:MODE] a regular file (MODE octal, default 0644); repeatable")
	fs.Var(&f.dirs, "dir", "DEST[:MODE] a directory (default 0755); repeatable")
	fs.Var(&f.entrypoint, "entrypoint", "one entrypoint argument; repeatable")
	fs.Var(&f.cmd, "cmd", "one cmd argument; repeatable")
	fs.Var(&f.env, "env", "KEY=VALUE; repeatable")
	fs.Var(&f.labels, "label", "KEY=VALUE config label; repeatable")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if f.ref == "" || f.output == "" {
		return nil, fmt.Errorf("--ref and --output are required")
	}
	return &f, nil
}

// parseTag parses --ref: an explicit tag, never latest.
func parseTag(ref string) (name.Tag, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("--ref %q: %w (an explicit tag is required)", ref, err)
	}
	if tag.TagStr() == "latest" {
		return name.Tag{}, fmt.Errorf("--ref %q: lull never builds a 'latest' tag; use the version", ref)
	}
	return tag, nil
}

// spec is the image the flags describe.
func (f *buildFlags) spec() (Spec, error) {
	spec := Spec{
		Entrypoint: f.entrypoint,
		Cmd:        f.cmd,
		User:       f.user,
		Env:        f.env,
		WorkingDir: f.workdir,
		CreateBy:   f.createdBy,
	}
	var err error
	if spec.OS, spec.Arch, spec.Variant, err = parsePlatform(f.platform); err != nil {
		return Spec{}, err
	}
	if spec.Created, err = parseCreated(f.created); err != nil {
		return Spec{}, err
	}
	if spec.Files, err = parseFiles(f.files, f.dirs); err != nil {
		return Spec{}, err
	}
	if spec.Labels, err = parseLabels(f.labels); err != nil {
		return Spec{}, err
	}
	for _, e := range f.env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return Spec{}, fmt.Errorf("--env %q: want KEY=VALUE", e)
		}
	}
	return spec, nil
}

// parseCreated parses --created, Unix seconds, into a UTC time.
func parseCreated(created string) (time.Time, error) {
	if created == "" {
		return time.Time{}, fmt.Errorf("no --created and no SOURCE_DATE_EPOCH: the creation time must come from the commit (git log -1 --format=%%ct)")
	}
	secs, err := strconv.ParseInt(created, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("--created %q: want Unix seconds: %w", created, err)
	}
	return time.Unix(secs, 0).UTC(), nil
}

// parseFiles parses the --file (SRC:DEST[:MODE]) and --dir (DEST[:MODE])
// flags into the layer's entries: the files, then the directories.
func parseFiles(files, dirs []string) ([]File, error) {
	var out []File
	for _, f := range files {
		parts := strings.Split(f, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
			return nil, fmt.Errorf("--file %q: want SRC:DEST[:MODE]", f)
		}
		mode := int64(0o644)
		if len(parts) == 3 {
			var err error
			if mode, err = strconv.ParseInt(parts[2], 8, 64); err != nil {
				return nil, fmt.Errorf("--file %q: mode: %w", f, err)
			}
		}
		out = append(out, File{Src: parts[0], Dest: parts[1], Mode: mode})
	}
	for _, d := range dirs {
		dest, m, hasMode := strings.Cut(d, ":")
		mode := int64(0o755)
		if hasMode {
			var err error
			if mode, err = strconv.ParseInt(m, 8, 64); err != nil {
				return nil, fmt.Errorf("--dir %q: mode: %w", d, err)
			}
		}
		out = append(out, File{Dest: dest, Mode: mode, Dir: true})
	}
	return out, nil
}

// parseLabels parses the --label flags (KEY=VALUE); nil when there are none.
func parseLabels(labels []string) (map[string]string, error) {
	var out map[string]string
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want KEY=VALUE", l)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out, nil
}

// layerSizes sums img's layers, compressed and uncompressed.
func layerSizes(img v1.Image) (compressed, uncompressed int64, err error) {
	layers, err := img.Layers()
	if err != nil {
		return 0, 0, err
	}
	for _, l := range layers {
		size, err := l.Size()
		if err != nil {
			return 0, 0, err
		}
		compressed += size
		rc, err := l.Uncompressed()
		if err != nil {
			return 0, 0, err
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return 0, 0, err
		}
		uncompressed += n
	}
	return compressed, uncompressed, nil
}

func parsePlatform(p string) (goos, goarch, variant string, err error) {
	parts := strings.Split(p, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return "", "", "", fmt.Errorf("--platform %q: want os/arch[/variant], e.g. linux/amd64", p)
	}
	if len(parts) == 3 {
		variant = parts[2]
	}
	return parts[0], parts[1], variant, nil
}
