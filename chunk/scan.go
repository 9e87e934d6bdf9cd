package chunk

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Input is one file to pack.
type Input struct {
	// Source is where the file is read from.
	Source string
	// Rel is the path recorded in the index: relative to the input root,
	// with forward slashes.
	Rel   string
	Label int32
	Size  int64
}

// Layout says how labels come from the input directory.
type Layout string

// Layouts.
const (
	// LayoutAuto is ImageFolder when the root holds only directories,
	// else plain.
	LayoutAuto Layout = "auto"
	// LayoutImageFolder: each subdirectory of the root is a class; the
	// label is its index in sorted order; files are found recursively.
	LayoutImageFolder Layout = "imagefolder"
	// LayoutPlain: every file below the root, recursively; no labels.
	LayoutPlain Layout = "plain"
)

// maxProblems is how many input problems a scan reports before stopping.
const maxProblems = 10

// problems collects input errors, up to maxProblems.
type problems struct {
	errs []error
	more int
}

func (p *problems) add(format string, args ...any) {
	if len(p.errs) < maxProblems {
		p.errs = append(p.errs, fmt.Errorf(format, args...))
		return
	}
	p.more++
}

func (p *problems) full() bool { return len(p.errs) >= maxProblems }

func (p *problems) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	if p.more > 0 {
		p.errs = append(p.errs, fmt.Errorf("… and %d more problems", p.more))
	}
	return errors.Join(p.errs...)
}

// ScanDir lists the files to pack below root, in a deterministic order
// (sorted paths), with their labels and the class names. Hidden entries
// (names starting with ".") are skipped. Symlinks to regular files are
// followed and packed under the link's name; symlinks to directories,
// broken links and special files (devices, pipes, sockets) are errors.
// Names must be valid UTF-8 and files at most MaxFileSize bytes.
func ScanDir(fsys FS, root string, layout Layout) ([]Input, []string, Layout, error) {
	top, err := fsys.ReadDir(root)
	if err != nil {
		return nil, nil, layout, fmt.Errorf("chunk: read input directory: %w", err)
	}
	top = visible(top)
	if layout == LayoutAuto {
		layout = detectLayout(top)
	}
	var p problems
	var inputs []Input
	var classes []string
	switch layout {
	case LayoutImageFolder:
		for _, e := range top {
			if !e.IsDir() {
				p.add("chunk: %s: ImageFolder layout needs only class directories at the top, this is a file", join(root, e.Name()))
				continue
			}
			label := int32(len(classes))
			classes = append(classes, e.Name())
			walk(fsys, root, e.Name(), label, &inputs, &p)
		}
	case LayoutPlain:
		walk(fsys, root, "", -1, &inputs, &p)
	default:
		return nil, nil, layout, fmt.Errorf("chunk: unknown layout %q (want auto, imagefolder or plain)", layout)
	}
	if err := p.err(); err != nil {
		return nil, nil, layout, err
	}
	if len(inputs) == 0 {
		return nil, nil, layout, fmt.Errorf("chunk: no files found in %s", root)
	}
	return inputs, classes, layout, nil
}

func visible(es []fs.DirEntry) []fs.DirEntry {
	out := es[:0:0]
	for _, e := range es {
		if !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e)
		}
	}
	return out
}

func detectLayout(top []fs.DirEntry) Layout {
	for _, e := range top {
		if !e.IsDir() {
			return LayoutPlain
		}
	}
	if len(top) == 0 {
		return LayoutPlain
	}
	return LayoutImageFolder
}

// walk adds the files below root/rel, recursively, in sorted order.
func walk(fsys FS, root, rel string, label int32, out *[]Input, p *problems) {
	dir := join(root, rel)
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		p.add("chunk: %w", err)
		return
	}
	for _, e := range visible(entries) {
		if p.full() {
			return
		}
		name := path.Join(rel, e.Name())
		src := join(root, name)
		if !utf8.ValidString(e.Name()) {
			p.add("chunk: %q: file name is not valid UTF-8", src)
			continue
		}
		if e.IsDir() {
			walk(fsys, root, name, label, out, p)
			continue
		}
		if in, err := stat(fsys, src, name); err != nil {
			p.add("%w", err)
		} else {
			in.Label = label
			*out = append(*out, in)
		}
	}
}

// stat checks that src is a regular file (or a symlink to one) of
// acceptable size.
func stat(fsys FS, src, rel string) (Input, error) {
	li, err := fsys.Lstat(src)
	if err != nil {
		return Input{}, fmt.Errorf("chunk: %w", err)
	}
	fi := li
	if li.Mode()&fs.ModeSymlink != 0 {
		if fi, err = fsys.Stat(src); err != nil {
			return Input{}, fmt.Errorf("chunk: %s: broken symlink: %w", src, errors.Unwrap(err))
		}
		if fi.IsDir() {
			return Input{}, fmt.Errorf("chunk: %s: symlink to a directory; brandrt follows symlinks to files only", src)
		}
	}
	if !fi.Mode().IsRegular() {
		return Input{}, fmt.Errorf("chunk: %s: not a regular file (%s)", src, fi.Mode().Type())
	}
	if fi.Size() > MaxFileSize {
		return Input{}, fmt.Errorf("chunk: %s: %d bytes, more than the format's limit of %d (1 GiB) per file", src, fi.Size(), MaxFileSize)
	}
	return Input{Source: src, Rel: rel, Size: fi.Size()}, nil
}

// ScanManifest reads a manifest of files to pack: one file per line,
// either "path" or "path<TAB>label", or a JSON object {"path": …,
// "label": …} (label optional). Relative paths are relative to root.
// Empty lines are skipped. A line that does not parse, a path listed
// twice, a label that is not a non-negative integer, and every problem
// ScanDir reports for a file are errors naming the line.
func ScanManifest(fsys FS, name, root string) ([]Input, error) {
	f, err := fsys.Open(name, false)
	if err != nil {
		return nil, fmt.Errorf("chunk: open manifest: %w", err)
	}
	defer f.Close()
	var p problems
	var inputs []Input
	seen := map[string]int{}
	sc := bufio.NewScanner(io.NewSectionReader(f, 0, 1<<40))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan() && !p.full(); line++ {
		text := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" {
			continue
		}
		rel, label, err := parseManifestLine(text)
		if err != nil {
			p.add("chunk: %s:%d: %v", name, line, err)
			continue
		}
		if prev, dup := seen[rel]; dup {
			p.add("chunk: %s:%d: %s is listed again (first on line %d)", name, line, rel, prev)
			continue
		}
		seen[rel] = line
		src := rel
		if !filepath.IsAbs(rel) {
			src = join(root, rel)
		}
		in, err := stat(fsys, src, rel)
		if err != nil {
			p.add("%s:%d: %w", name, line, err)
			continue
		}
		in.Label = label
		inputs = append(inputs, in)
	}
	if err := sc.Err(); err != nil {
		p.add("chunk: read %s: %w", name, err)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	if len(inputs) == 0 {
		return nil, fmt.Errorf("chunk: manifest %s lists no files", name)
	}
	return inputs, nil
}

func parseManifestLine(text string) (rel string, label int32, err error) {
	label = -1
	if strings.HasPrefix(strings.TrimSpace(text), "{") {
		var e struct {
			Path  *string `json:"path"`
			Label *int64  `json:"label"`
		}
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return "", 0, fmt.Errorf("not a JSON object {\"path\": …, \"label\": …}: %v", err)
		}
		if e.Path == nil || *e.Path == "" {
			return "", 0, errors.New(`JSON line without a "path"`)
		}
		if e.Label != nil {
			if *e.Label < 0 || *e.Label > 1<<31-1 {
				return "", 0, fmt.Errorf("label %d out of range [0, 2147483647]", *e.Label)
			}
			label = int32(*e.Label)
		}
		rel, err := cleanRel(*e.Path)
		return rel, label, err
	}
	rel, lab, hasLabel := strings.Cut(text, "\t")
	if hasLabel {
		v, err := strconv.ParseInt(strings.TrimSpace(lab), 10, 32)
		if err != nil || v < 0 {
			return "", 0, fmt.Errorf("label %q is not a non-negative integer", lab)
		}
		label = int32(v)
	}
	r, err := cleanRel(rel)
	return r, label, err
}

func cleanRel(p string) (string, error) {
	if !utf8.ValidString(p) {
		return "", fmt.Errorf("path %q is not valid UTF-8", p)
	}
	if strings.TrimSpace(p) == "" {
		return "", errors.New("empty path")
	}
	return filepath.ToSlash(filepath.Clean(p)), nil
}
