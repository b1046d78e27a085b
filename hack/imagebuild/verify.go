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
	// docker-archive view.
	dm, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if len(dm) != 1 || len(dm[0].RepoTags) != 1 {
		return nil, fmt.Errorf("manifest.json: want one image with one RepoTag, got %+v", dm)
	}
	ref, err := name.NewTag(dm[0].RepoTags[0], name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("manifest.json RepoTag: %w", err)
	}
	dimg, err := tarball.ImageFromPath(path, &ref)
	if err != nil {
		return nil, fmt.Errorf("docker-archive view: %w", err)
	}
	if err := validate.Image(dimg); err != nil {
		return nil, fmt.Errorf("docker-archive view invalid: %w", err)
	}
	dcfg, err := dimg.ConfigName()
	if err != nil {
		return nil, err
	}
	dlayers, err := layerDigests(dimg)
	if err != nil {
		return nil, err
	}

	// OCI layout view.
	dir, err := os.MkdirTemp("", "imagebuild-verify-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := untar(path, dir); err != nil {
		return nil, err
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("OCI layout view: %w", err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("OCI layout view: %w", err)
	}
	if err := validate.Index(idx); err != nil {
		return nil, fmt.Errorf("OCI layout view invalid: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(im.Manifests) != 1 {
		return nil, fmt.Errorf("index.json: want one manifest, got %d", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if got := desc.Annotations[annotationImageName]; got != ref.String() {
		return nil, fmt.Errorf("index.json: %s = %q, manifest.json RepoTag %q", annotationImageName, got, ref.String())
	}
	if got := desc.Annotations[annotationRefName]; got != ref.TagStr() {
		return nil, fmt.Errorf("index.json: %s = %q, want %q", annotationRefName, got, ref.TagStr())
	}
	var platforms []string
	var limg v1.Image
	if desc.MediaType.IsIndex() {
		// A multi-platform image: every platform's image valid and
		// labelled with its config's platform; manifest.json is the first.
		if limg, platforms, err = verifyPlatforms(idx, desc.Digest); err != nil {
			return nil, fmt.Errorf("OCI layout view: %w", err)
		}
	} else if limg, err = idx.Image(desc.Digest); err != nil {
		return nil, fmt.Errorf("OCI layout view: %w", err)
	}
	if err := validate.Image(limg); err != nil {
		return nil, fmt.Errorf("OCI layout view invalid: %w", err)
	}
	lcfg, err := limg.ConfigName()
	if err != nil {
		return nil, err
	}
	llayers, err := layerDigests(limg)
	if err != nil {
		return nil, err
	}

	// Both views are one image.
	if lcfg != dcfg {
		return nil, fmt.Errorf("config differs: index.json's manifest has %s, manifest.json %s", lcfg, dcfg)
	}
	if fmt.Sprint(llayers) != fmt.Sprint(dlayers) {
		return nil, fmt.Errorf("layers differ: index.json's manifest has %v, manifest.json %v", llayers, dlayers)
	}
	if want := "blobs/sha256/" + lcfg.Hex; dm[0].Config != want {
		return nil, fmt.Errorf("manifest.json Config %q, want %q", dm[0].Config, want)
	}
	return &Verified{Ref: ref, Digest: desc.Digest, Config: lcfg, Layers: llayers, Platforms: platforms}, nil
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
			_, err = io.Copy(out, tr)
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
