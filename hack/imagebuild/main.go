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

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	var (
		files, dirs, entrypoint, cmd, env, labels listFlag
		ref                                       = fs.String("ref", "", "image reference with an explicit tag, e.g. lull.dev/lull-scheduler:v0.1.0 (never latest)")
		output                                    = fs.String("output", "", "archive to write (OCI layout + docker-archive tar)")
		digestFile                                = fs.String("digest-file", "", "also write the manifest digest here")
		platform                                  = fs.String("platform", "", "os/arch[/variant], e.g. linux/amd64")
		created                                   = fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "creation time and file mtimes, Unix seconds (default $SOURCE_DATE_EPOCH)")
		user                                      = fs.String("user", "", "user[:group] the entrypoint runs as")
		workdir                                   = fs.String("workdir", "", "working directory")
		createdBy                                 = fs.String("created-by", "", "history created_by text")
	)
	fs.Var(&files, "file", "SRC:DEST[:MODE] a regular file (MODE octal, default 0644); repeatable")
	fs.Var(&dirs, "dir", "DEST[:MODE] a directory (default 0755); repeatable")
	fs.Var(&entrypoint, "entrypoint", "one entrypoint argument; repeatable")
	fs.Var(&cmd, "cmd", "one cmd argument; repeatable")
	fs.Var(&env, "env", "KEY=VALUE; repeatable")
	fs.Var(&labels, "label", "KEY=VALUE config label; repeatable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *ref == "" || *output == "" {
		return fmt.Errorf("--ref and --output are required")
	}
	tag, err := name.NewTag(*ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("--ref %q: %w (an explicit tag is required)", *ref, err)
	}
	if tag.TagStr() == "latest" {
		return fmt.Errorf("--ref %q: lull never builds a 'latest' tag; use the version", *ref)
	}
	spec := Spec{
		Entrypoint: entrypoint,
		Cmd:        cmd,
		User:       *user,
		Env:        env,
		WorkingDir: *workdir,
		CreateBy:   *createdBy,
	}
	if spec.OS, spec.Arch, spec.Variant, err = parsePlatform(*platform); err != nil {
		return err
	}
	if *created == "" {
		return fmt.Errorf("no --created and no SOURCE_DATE_EPOCH: the creation time must come from the commit (git log -1 --format=%%ct)")
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if err != nil {
		return fmt.Errorf("--created %q: want Unix seconds: %w", *created, err)
	}
	spec.Created = time.Unix(secs, 0).UTC()
	for _, f := range files {
		parts := strings.Split(f, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
			return fmt.Errorf("--file %q: want SRC:DEST[:MODE]", f)
		}
		mode := int64(0o644)
		if len(parts) == 3 {
			if mode, err = strconv.ParseInt(parts[2], 8, 64); err != nil {
				return fmt.Errorf("--file %q: mode: %w", f, err)
			}
		}
		spec.Files = append(spec.Files, File{Src: parts[0], Dest: parts[1], Mode: mode})
	}
	for _, d := range dirs {
		dest, m, hasMode := strings.Cut(d, ":")
		mode := int64(0o755)
		if hasMode {
			if mode, err = strconv.ParseInt(m, 8, 64); err != nil {
				return fmt.Errorf("--dir %q: mode: %w", d, err)
			}
		}
		spec.Files = append(spec.Files, File{Dest: dest, Mode: mode, Dir: true})
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("--label %q: want KEY=VALUE", l)
		}
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels[k] = v
	}
	for _, e := range env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("--env %q: want KEY=VALUE", e)
		}
	}

	img, err := Build(spec)
	if err != nil {
		return err
	}
	if err := WriteArchiveFile(*output, img, tag, spec.Created); err != nil {
		return fmt.Errorf("writing %s: %w", *output, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if *digestFile != "" {
		if err := os.WriteFile(*digestFile, []byte(digest.String()+"\n"), 0o644); err != nil {
			return err
		}
	}
	var compressed, uncompressed int64
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		size, err := l.Size()
		if err != nil {
			return err
		}
		compressed += size
		rc, err := l.Uncompressed()
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return err
		}
		uncompressed += n
	}
	st, err := os.Stat(*output)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ref=%s digest=%s layer_compressed=%d layer_uncompressed=%d archive=%d\n",
		tag.String(), digest, compressed, uncompressed, st.Size())
	return nil
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
