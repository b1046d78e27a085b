package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations containerd's importer reads from index.json: the first names
// the image (`ctr -n k8s.io images import` creates exactly this reference),
// the second is the OCI layout's tag.
const (
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
)

// dockerManifest is one entry of a docker-archive's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

type blob struct {
	hex  string
	size int64
	open func() (io.ReadCloser, error)
}

// WriteArchive writes img as one tar that is both an OCI image layout
// (oci-layout, index.json, blobs/sha256/…) and a docker-archive
// (manifest.json whose Config and Layers point into blobs/sha256/), the
// layout `docker save` writes since Docker 25. containerd (`ctr images
// import`), Docker (`docker load`, old releases included: they only read
// manifest.json and decompress gzip layers), skopeo (`oci-archive:` and
// `docker-archive:`) and crane read it. Every tar header carries mtime,
// owner 0:0 and fixed modes, entries are in a fixed order: the bytes
// depend only on the image and ref.
func WriteArchive(w io.Writer, img v1.Image, ref name.Tag, mtime time.Time) error {
	return writeArchive(w, nil, []v1.Image{img}, ref, mtime)
}

// WriteIndexArchive writes a multi-platform image the same way: index.json
// names idx (an OCI image index of one image per platform, imgs in its
// order) and every blob of every image is in blobs/sha256/. A
// docker-archive holds one image per tag: manifest.json describes imgs[0],
// the first platform.
func WriteIndexArchive(w io.Writer, idx v1.ImageIndex, imgs []v1.Image, ref name.Tag, mtime time.Time) error {
	return writeArchive(w, idx, imgs, ref, mtime)
}

func writeArchive(w io.Writer, idx v1.ImageIndex, imgs []v1.Image, ref name.Tag, mtime time.Time) error {
	blobs := map[string]blob{}
	addBytes := func(h v1.Hash, b []byte) {
		blobs[h.Hex] = blob{hex: h.Hex, size: int64(len(b)), open: func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(b)), nil
		}}
	}
	var dm dockerManifest
	var top v1.Descriptor
	for i, img := range imgs {
		mt, err := img.MediaType()
		if err != nil {
			return err
		}
		rawManifest, err := img.RawManifest()
		if err != nil {
			return err
		}
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		cfgName, err := img.ConfigName()
		if err != nil {
			return err
		}
		rawConfig, err := img.RawConfigFile()
		if err != nil {
			return err
		}
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		addBytes(digest, rawManifest)
		addBytes(cfgName, rawConfig)
		var layerPaths []string
		for _, l := range layers {
			d, err := l.Digest()
			if err != nil {
				return err
			}
			size, err := l.Size()
			if err != nil {
				return err
			}
			blobs[d.Hex] = blob{hex: d.Hex, size: size, open: l.Compressed}
			layerPaths = append(layerPaths, "blobs/sha256/"+d.Hex)
		}
		if i == 0 {
			dm = dockerManifest{Config: "blobs/sha256/" + cfgName.Hex, RepoTags: []string{ref.String()}, Layers: layerPaths}
			top = v1.Descriptor{MediaType: mt, Digest: digest, Size: int64(len(rawManifest))}
		}
	}
	if idx != nil {
		mt, err := idx.MediaType()
		if err != nil {
			return err
		}
		raw, err := idx.RawManifest()
		if err != nil {
			return err
		}
		digest, err := idx.Digest()
		if err != nil {
			return err
		}
		addBytes(digest, raw)
		top = v1.Descriptor{MediaType: mt, Digest: digest, Size: int64(len(raw))}
	}
	top.Annotations = map[string]string{
		annotationImageName: ref.String(),
		annotationRefName:   ref.TagStr(),
	}
	index := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests:     []v1.Descriptor{top},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	manifestJSON, err := json.Marshal([]dockerManifest{dm})
	if err != nil {
		return err
	}
	layoutJSON := []byte(`{"imageLayoutVersion":"1.0.0"}`)

	mtime = mtime.UTC().Truncate(time.Second)
	tw := tar.NewWriter(w)
	dir := func(n string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: n, Mode: 0o755, ModTime: mtime})
	}
	file := func(n string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: size, ModTime: mtime}); err != nil {
			return err
		}
		written, err := io.Copy(tw, r)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if written != size {
			return fmt.Errorf("%s: wrote %d bytes, expected %d", n, written, size)
		}
		return nil
	}
	if err := dir("blobs/"); err != nil {
		return err
	}
	if err := dir("blobs/sha256/"); err != nil {
		return err
	}
	hexes := make([]string, 0, len(blobs))
	for h := range blobs {
		hexes = append(hexes, h)
	}
	sort.Strings(hexes)
	for _, h := range hexes {
		b := blobs[h]
		rc, err := b.open()
		if err != nil {
			return err
		}
		err = file("blobs/sha256/"+h, b.size, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"index.json", indexJSON},
		{"manifest.json", manifestJSON},
		{"oci-layout", layoutJSON},
	} {
		if err := file(f.name, int64(len(f.data)), bytes.NewReader(f.data)); err != nil {
			return err
		}
	}
	return tw.Close()
}

// WriteArchiveFile writes the archive to path atomically (a temporary file
// in the same folder, renamed when complete).
func WriteArchiveFile(path string, img v1.Image, ref name.Tag, mtime time.Time) error {
	return writeFile(path, func(w io.Writer) error { return WriteArchive(w, img, ref, mtime) })
}

// writeFile writes path atomically with write: a temporary file in the
// same folder, renamed when complete.
func writeFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
