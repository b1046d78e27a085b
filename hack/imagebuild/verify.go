package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// Verified is what VerifyArchive found in an archive.
type Verified struct {
	Ref    name.Tag
	Digest v1.Hash // the OCI manifest's digest (index.json)
	Config v1.Hash
	Layers []v1.Hash
	// Platforms of a multi-platform image (an index), in order; the
	// first is the one manifest.json describes. Empty for one image.
	Platforms []string
}

// VerifyArchive reads an archive written by WriteArchive through both of
// its views and checks that they agree:
//   - docker-archive: go-containerregistry's tarball.ImageFromPath (the
//     manifest.json reader `docker load` and crane use), validated with
//     validate.Image (config and layer digests, diffIDs, sizes);
//   - OCI image layout: the tar unpacked into a temporary folder and read
//     with layout.FromPath, the index and image validated; index.json must
//     carry io.containerd.image.name = the RepoTag and
//     org.opencontainers.image.ref.name = its tag.
func VerifyArchive(path string) (*Verified, error) {
	dm, ref, dview, err := readDockerView(path)
	if err != nil {
		return nil, err
	}
	desc, lview, platforms, err := readLayoutView(path, ref)
	if err != nil {
		return nil, err
	}

	// Both views are one image.
	if lview.config != dview.config {
		return nil, fmt.Errorf("config differs: index.json's manifest has %s, manifest.json %s", lview.config, dview.config)
	}
	if fmt.Sprint(lview.layers) != fmt.Sprint(dview.layers) {
		return nil, fmt.Errorf("layers differ: index.json's manifest has %v, manifest.json %v", lview.layers, dview.layers)
	}
	if want := "blobs/sha256/" + lview.config.Hex; dm[0].Config != want {
		return nil, fmt.Errorf("manifest.json Config %q, want %q", dm[0].Config, want)
	}
	return &Verified{Ref: ref, Digest: desc.Digest, Config: lview.config, Layers: lview.layers, Platforms: platforms}, nil
}

// imageView is the image one view of an archive shows: its config's and
// layers' digests.
type imageView struct {
	config v1.Hash
	layers []v1.Hash
}

// viewOf validates img, the image of the view named what, and reads its
// digests.
func viewOf(what string, img v1.Image) (imageView, error) {
	if err := validate.Image(img); err != nil {
		return imageView{}, fmt.Errorf("%s invalid: %w", what, err)
	}
	cfg, err := img.ConfigName()
	if err != nil {
		return imageView{}, err
	}
	layers, err := layerDigests(img)
	if err != nil {
		return imageView{}, err
	}
	return imageView{config: cfg, layers: layers}, nil
}

// readDockerView reads the archive as a docker-archive: its manifest.json,
// which must hold one image with one RepoTag, and that image.
func readDockerView(path string) (tarball.Manifest, name.Tag, imageView, error) {
	dm, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		return nil, name.Tag{}, imageView{}, fmt.Errorf("manifest.json: %w", err)
	}
	if len(dm) != 1 || len(dm[0].RepoTags) != 1 {
		return nil, name.Tag{}, imageView{}, fmt.Errorf("manifest.json: want one image with one RepoTag, got %+v", dm)
	}
	ref, err := name.NewTag(dm[0].RepoTags[0], name.StrictValidation)
	if err != nil {
		return nil, name.Tag{}, imageView{}, fmt.Errorf("manifest.json RepoTag: %w", err)
	}
	img, err := tarball.ImageFromPath(path, &ref)
	if err != nil {
		return nil, name.Tag{}, imageView{}, fmt.Errorf("docker-archive view: %w", err)
	}
	view, err := viewOf("docker-archive view", img)
	if err != nil {
		return nil, name.Tag{}, imageView{}, err
	}
	return dm, ref, view, nil
}

// readLayoutView reads the archive as an OCI image layout, unpacked into
// a temporary folder: index.json's one descriptor, annotated with ref,
// and its image (the first platform's of a multi-platform image, whose
// platforms it returns in order).
func readLayoutView(path string, ref name.Tag) (v1.Descriptor, imageView, []string, error) {
	dir, err := os.MkdirTemp("", "imagebuild-verify-")
	if err != nil {
		return v1.Descriptor{}, imageView{}, nil, err
	}
	defer os.RemoveAll(dir)
	if err := untar(path, dir); err != nil {
		return v1.Descriptor{}, imageView{}, nil, err
	}
	idx, desc, err := readLayoutIndex(dir, ref)
	if err != nil {
		return v1.Descriptor{}, imageView{}, nil, err
	}
	var platforms []string
	var img v1.Image
	if desc.MediaType.IsIndex() {
		// A multi-platform image: every platform's image valid and
		// labelled with its config's platform; manifest.json is the first.
		if img, platforms, err = verifyPlatforms(idx, desc.Digest); err != nil {
			return v1.Descriptor{}, imageView{}, nil, fmt.Errorf("OCI layout view: %w", err)
		}
	} else if img, err = idx.Image(desc.Digest); err != nil {
		return v1.Descriptor{}, imageView{}, nil, fmt.Errorf("OCI layout view: %w", err)
	}
	view, err := viewOf("OCI layout view", img)
	if err != nil {
		return v1.Descriptor{}, imageView{}, nil, err
	}
	return desc, view, platforms, nil
}

// readLayoutIndex reads and validates the OCI layout in dir; its
// index.json must name one manifest, annotated with ref's name and tag.
func readLayoutIndex(dir string, ref name.Tag) (v1.ImageIndex, v1.Descriptor, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("OCI layout view: %w", err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("OCI layout view: %w", err)
	}
	if err := validate.Index(idx); err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("OCI layout view invalid: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	if len(im.Manifests) != 1 {
		return nil, v1.Descriptor{}, fmt.Errorf("index.json: want one manifest, got %d", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if got := desc.Annotations[annotationImageName]; got != ref.String() {
		return nil, v1.Descriptor{}, fmt.Errorf("index.json: %s = %q, manifest.json RepoTag %q", annotationImageName, got, ref.String())
	}
	if got := desc.Annotations[annotationRefName]; got != ref.TagStr() {
		return nil, v1.Descriptor{}, fmt.Errorf("index.json: %s = %q, want %q", annotationRefName, got, ref.TagStr())
	}
	return idx, desc, nil
}

// verifyPlatforms checks the multi-platform index digest in idx: each of
// its images valid, its descriptor's platform its config's, no platform
// twice. It returns the first image and the platforms in order.
func verifyPlatforms(idx v1.ImageIndex, digest v1.Hash) (v1.Image, []string, error) {
	child, err := idx.ImageIndex(digest)
	if err != nil {
		return nil, nil, err
	}
	if err := validate.Index(child); err != nil {
		return nil, nil, err
	}
	cm, err := child.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	var first v1.Image
	var platforms []string
	for _, d := range cm.Manifests {
		img, err := child.Image(d.Digest)
		if err != nil {
			return nil, nil, err
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, nil, err
		}
		want := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
		if d.Platform == nil || d.Platform.String() != want.String() {
			return nil, nil, fmt.Errorf("manifest %s: descriptor platform %v, config says %s", d.Digest, d.Platform, want.String())
		}
		if slices.Contains(platforms, want.String()) {
			return nil, nil, fmt.Errorf("platform %s twice", want.String())
		}
		platforms = append(platforms, want.String())
		if first == nil {
			first = img
		}
	}
	if first == nil {
		return nil, nil, errors.New("an image index without images")
	}
	return first, platforms, nil
}

func layerDigests(img v1.Image) ([]v1.Hash, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	var out []v1.Hash
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// untar unpacks the archive's directories and regular files into dir,
// refusing anything else and any path leaving dir.
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		clean := filepath.Clean(hdr.Name)
		if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return fmt.Errorf("%s: entry %q leaves the archive", path, hdr.Name)
		}
		target := filepath.Join(dir, clean)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.Create(target)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr) //nolint:gosec // G110: a layer of the image this tool just built, unpacked to verify it; nothing from elsewhere
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected entry %q (type %c)", path, hdr.Name, hdr.Typeflag)
		}
	}
}

// verifyMain implements `imagebuild verify ARCHIVE...`: it prints one line
// per archive (ref and digest) and fails on the first bad one.
func verifyMain(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("verify: no archives given")
	}
	for _, p := range args {
		v, err := VerifyArchive(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		js, _ := json.Marshal(v.Layers)
		fmt.Fprintf(stdout, "%s: ok ref=%s digest=%s config=%s layers=%s", p, v.Ref, v.Digest, v.Config, js)
		if len(v.Platforms) > 0 {
			fmt.Fprintf(stdout, " platforms=%s", strings.Join(v.Platforms, ","))
		}
		fmt.Fprintln(stdout)
	}
	return nil
}
