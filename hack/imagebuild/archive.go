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

// blobSet is an archive's blobs/sha256/ entries by hex digest.
type blobSet map[string]blob

// addBytes adds b, whose digest is h.
func (bs blobSet) addBytes(h v1.Hash, b []byte) {
	bs[h.Hex] = blob{hex: h.Hex, size: int64(len(b)), open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}}
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
	blobs := blobSet{}
	var dm dockerManifest
	var top v1.Descriptor
	for i, img := range imgs {
		desc, m, err := blobs.addImage(img, ref)
		if err != nil {
			return err
		}
		if i == 0 {
			top, dm = desc, m
		}
	}
	if idx != nil {
		desc, err := blobs.addIndex(idx)
		if err != nil {
			return err
		}
		top = desc
	}
	files, err := topLevelFiles(top, dm, ref)
	if err != nil {
		return err
	}
	return writeTar(w, blobs, files, mtime)
}

// addImage adds img's manifest, config and layers, and returns the
// descriptor of its manifest and its docker-archive manifest.json entry.
func (bs blobSet) addImage(img v1.Image, ref name.Tag) (v1.Descriptor, dockerManifest, error) {
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, dockerManifest{}, err
	}
	rawManifest, err := img.RawManifest()
	if err != nil {
		return v1.Descriptor{}, dockerManifest{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, dockerManifest{}, err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return v1.Descriptor{}, dockerManifest{}, err
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return v1.Descriptor{}, dockerManifest{}, err
	}
	layers, err := img.Layers()
	if err != nil {
		return v1.Descriptor{}, dockerManifest{}, err
	}
	bs.addBytes(digest, rawManifest)
	bs.addBytes(cfgName, rawConfig)
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return v1.Descriptor{}, dockerManifest{}, err
		}
		size, err := l.Size()
		if err != nil {
			return v1.Descriptor{}, dockerManifest{}, err
		}
		bs[d.Hex] = blob{hex: d.Hex, size: size, open: l.Compressed}
		layerPaths = append(layerPaths, "blobs/sha256/"+d.Hex)
	}
	dm := dockerManifest{Config: "blobs/sha256/" + cfgName.Hex, RepoTags: []string{ref.String()}, Layers: layerPaths}
	return v1.Descriptor{MediaType: mt, Digest: digest, Size: int64(len(rawManifest))}, dm, nil
}

// addIndex adds idx's manifest and returns its descriptor.
func (bs blobSet) addIndex(idx v1.ImageIndex) (v1.Descriptor, error) {
	mt, err := idx.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	raw, err := idx.RawManifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	bs.addBytes(digest, raw)
	return v1.Descriptor{MediaType: mt, Digest: digest, Size: int64(len(raw))}, nil
}

// archiveFile is a file at the top of the archive.
type archiveFile struct {
	name string
	data []byte
}

// topLevelFiles are index.json (naming top, annotated with ref),
// manifest.json (dm) and oci-layout, in the order they are written.
func topLevelFiles(top v1.Descriptor, dm dockerManifest, ref name.Tag) ([]archiveFile, error) {
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
		return nil, err
	}
	manifestJSON, err := json.Marshal([]dockerManifest{dm})
	if err != nil {
		return nil, err
	}
	return []archiveFile{
		{"index.json", indexJSON},
		{"manifest.json", manifestJSON},
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
	}, nil
}

// writeTar writes the archive: blobs/, blobs/sha256/, the blobs in digest
// order, then files.
func writeTar(w io.Writer, blobs blobSet, files []archiveFile, mtime time.Time) error {
	tw := tarWriter{Writer: tar.NewWriter(w), mtime: mtime.UTC().Truncate(time.Second)}
	if err := tw.dir("blobs/"); err != nil {
		return err
	}
	if err := tw.dir("blobs/sha256/"); err != nil {
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
		err = tw.file("blobs/sha256/"+h, b.size, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := tw.file(f.name, int64(len(f.data)), bytes.NewReader(f.data)); err != nil {
			return err
		}
	}
	return tw.Close()
}

// tarWriter writes entries with the archive's fixed mtime, owner 0:0 and
// modes.
type tarWriter struct {
	*tar.Writer
	mtime time.Time
}

func (tw tarWriter) dir(n string) error {
	return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: n, Mode: 0o755, ModTime: tw.mtime})
}

// file writes the regular file n of size bytes read from r.
func (tw tarWriter) file(n string, size int64, r io.Reader) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: size, ModTime: tw.mtime}); err != nil {
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
