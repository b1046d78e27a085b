package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Index is an OCI image index of imgs, one per platform, in their order,
// each descriptor carrying its image's platform (from its config).
func Index(imgs []v1.Image) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	seen := map[string]bool{}
	for _, img := range imgs {
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		p := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
		if seen[p.String()] {
			return nil, fmt.Errorf("two images for platform %s", p.String())
		}
		seen[p.String()] = true
		mt, err := img.MediaType()
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{MediaType: mt, Platform: &p}})
	}
	if len(adds) == 0 {
		return nil, fmt.Errorf("no images")
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...), nil
}

// loadImage reads the one image of an archive WriteArchive wrote, through
// its OCI layout view (the blobs as written: the same digests).
func loadImage(path, dir string) (v1.Image, error) {
	if err := untar(path, dir); err != nil {
		return nil, err
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(im.Manifests) != 1 || !im.Manifests[0].MediaType.IsImage() {
		return nil, fmt.Errorf("want an archive of one single-platform image")
	}
	return idx.Image(im.Manifests[0].Digest)
}

// indexMain implements `imagebuild index --ref REF --output OUT ARCHIVE...`:
// one archive of a multi-platform image (an OCI image index) from
// single-platform archives of the same image, the first platform first.
func indexMain(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("imagebuild index", flag.ContinueOnError)
	ref := fs.String("ref", "", "image reference with an explicit tag")
	output := fs.String("output", "", "archive to write")
	digestFile := fs.String("digest-file", "", "also write the index's digest here")
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "file mtimes in the archive, Unix seconds (default $SOURCE_DATE_EPOCH)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ref == "" || *output == "" || fs.NArg() < 1 {
		return fmt.Errorf("index: --ref, --output and at least one archive are required")
	}
	tag, err := name.NewTag(*ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("--ref %q: %w (an explicit tag is required)", *ref, err)
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if err != nil {
		return fmt.Errorf("--created %q: want Unix seconds: %w", *created, err)
	}
	tmp, err := os.MkdirTemp("", "imagebuild-index-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var imgs []v1.Image
	for i, p := range fs.Args() {
		img, err := loadImage(p, filepath.Join(tmp, strconv.Itoa(i)))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		imgs = append(imgs, img)
	}
	idx, err := Index(imgs)
	if err != nil {
		return err
	}
	if err := writeFile(*output, func(w io.Writer) error { return WriteIndexArchive(w, idx, imgs, tag, time.Unix(secs, 0)) }); err != nil {
		return fmt.Errorf("writing %s: %w", *output, err)
	}
	st, err := os.Stat(*output)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if *digestFile != "" {
		if err := os.WriteFile(*digestFile, []byte(digest.String()+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "ref=%s digest=%s platforms=%d archive=%d\n", tag, digest, len(imgs), st.Size())
	return nil
}
