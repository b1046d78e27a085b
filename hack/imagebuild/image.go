package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of the image's single layer: a regular file copied from
// Src (on the build machine) to Dest (an absolute path in the image), or a
// directory when Src is empty and Dir is set. Mode holds the Unix permission
// bits (sticky/setuid included, e.g. 01777), never taken from the source.
type File struct {
	Src  string
	Dest string
	Mode int64
	Dir  bool
}

// Spec is everything an image is made of. Two builds from equal Specs (and
// equal source file contents) give the same digest: nothing else — host
// name, clock, file owners or mtimes, map order — reaches the image.
type Spec struct {
	Files      []File
	Entrypoint []string
	Cmd        []string
	User       string
	Env        []string
	WorkingDir string
	Labels     map[string]string
	// Created is the config's `created`, every history entry's and every
	// file's mtime: the commit time (SOURCE_DATE_EPOCH), never the clock.
	Created  time.Time
	OS       string
	Arch     string
	Variant  string
	CreateBy string // history's created_by, e.g. "lull hack/images.sh"
}

// Build assembles an OCI image (OCI manifest and config media types, one
// gzip layer) from spec.
func Build(spec Spec) (v1.Image, error) {
	if spec.Created.IsZero() {
		return nil, fmt.Errorf("no creation time: set SOURCE_DATE_EPOCH or --created (the clock is never used)")
	}
	if spec.OS == "" || spec.Arch == "" {
		return nil, fmt.Errorf("no platform: OS and architecture are required")
	}
	created := spec.Created.UTC().Truncate(time.Second)

	layerTar, err := layerTar(spec.Files, created)
	if err != nil {
		return nil, err
	}
	gz, err := gzipBytes(layerTar)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}

	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	cf, err := base.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = spec.OS, spec.Arch, spec.Variant
	cf.Created = v1.Time{Time: created}
	cf.RootFS.Type = "layers"
	cf.Config = v1.Config{
		Entrypoint: spec.Entrypoint,
		Cmd:        spec.Cmd,
		User:       spec.User,
		Env:        spec.Env,
		WorkingDir: spec.WorkingDir,
		Labels:     spec.Labels,
	}
	img, err := mutate.ConfigFile(base, cf)
	if err != nil {
		return nil, err
	}
	createdBy := spec.CreateBy
	if createdBy == "" {
		createdBy = "lull hack/imagebuild"
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: createdBy,
			Comment:   fmt.Sprintf("%d files", countFiles(spec.Files)),
		},
	})
}

func countFiles(files []File) int {
	n := 0
	for _, f := range files {
		if !f.Dir {
			n++
		}
	}
	return n
}

type entry struct {
	name string // without leading "/", directories end in "/"
	file File
}

// layerFiles is what a layer of files holds, by path without the leading
// "/": each file, and each parent directory not listed with its own mode
// (0755). A destination that is not absolute, the root, given twice, a
// file that is another's parent, a mode beyond 07777 or a file without a
// source is an error.
func layerFiles(files []File) (map[string]File, error) {
	byPath := map[string]File{}
	explicitDir := map[string]bool{}
	for _, f := range files {
		if !strings.HasPrefix(f.Dest, "/") {
			return nil, fmt.Errorf("destination %q is not absolute", f.Dest)
		}
		p := strings.TrimPrefix(path.Clean(f.Dest), "/")
		if p == "" || p == "." {
			return nil, fmt.Errorf("destination %q is the root", f.Dest)
		}
		if f.Mode&^07777 != 0 {
			return nil, fmt.Errorf("%s: mode %o has bits beyond 07777", f.Dest, f.Mode)
		}
		if old, dup := byPath[p]; dup && (old.Dir != f.Dir || !f.Dir || explicitDir[p]) {
			return nil, fmt.Errorf("destination %q given twice", f.Dest)
		}
		if !f.Dir && f.Src == "" {
			return nil, fmt.Errorf("%s: no source file", f.Dest)
		}
		byPath[p] = f
		if f.Dir {
			explicitDir[p] = true
		}
		// Parent directories, unless listed with their own mode.
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			if prev, ok := byPath[d]; ok {
				if !prev.Dir {
					return nil, fmt.Errorf("%q is a file and a parent of %q", "/"+d, f.Dest)
				}
				continue
			}
			byPath[d] = File{Dest: "/" + d, Mode: 0o755, Dir: true}
		}
	}
	return byPath, nil
}

// layerTar writes the layer as an uncompressed tar: entries sorted by path,
// every parent directory present (0755 unless given), owned by 0:0 with
// empty user and group names, mtime = created.
func layerTar(files []File, created time.Time) ([]byte, error) {
	byPath, err := layerFiles(files)
	if err != nil {
		return nil, err
	}
	entries := make([]entry, 0, len(byPath))
	for p, f := range byPath {
		if f.Dir {
			p += "/"
		}
		entries = append(entries, entry{name: p, file: f})
	}
	// Sorting the names with their trailing "/" puts "a/" before "a/b" and
	// "a-b": a parent always precedes its children.
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    e.name,
			Mode:    e.file.Mode,
			ModTime: created,
			Uid:     0,
			Gid:     0,
		}
		var data []byte
		if e.file.Dir {
			hdr.Typeflag = tar.TypeDir
		} else {
			var err error
			if data, err = os.ReadFile(e.file.Src); err != nil {
				return nil, err
			}
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzipBytes compresses at the default level with an empty gzip header (no
// name, no mtime): the output depends only on the input and Go's
// compress/gzip, which is deterministic for a given Go release. (The best
// level saves ~1% on lull's binaries and takes 2-3 times as long.)
func gzipBytes(b []byte) ([]byte, error) {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
