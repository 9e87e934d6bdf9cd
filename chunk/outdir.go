package chunk

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// checkApart refuses an output directory inside the input directory (a
// later pack would take the output for input: with --force, the old
// dataset became a class of the new one) and an input inside the output.
// Paths are compared cleaned and absolute, with symlinks resolved as far
// as they exist (the output may not exist yet). An empty input is not
// checked.
func checkApart(input, out string) error {
	if input == "" {
		return nil
	}
	in, o := resolve(input), resolve(out)
	switch {
	case in == o:
		return fmt.Errorf("chunk: the output directory %s is the input directory %s; choose an output outside the input", show(out, o), show(input, in))
	case within(in, o):
		return fmt.Errorf("chunk: the output directory %s is inside the input directory %s: a later pack would take the output for input; choose an output outside the input", show(out, o), show(input, in))
	case within(o, in):
		return fmt.Errorf("chunk: the input directory %s is inside the output directory %s; choose an output that does not hold the input", show(input, in), show(out, o))
	}
	return nil
}

// checkInputsOutside refuses inputs inside the output directory (listed
// in a manifest, they can be anywhere), up to maxProblems of them. Their
// paths are compared as written, made absolute.
func checkInputsOutside(inputs []Input, out string) error {
	o, lexical := resolve(out), absolute(out)
	wd, _ := os.Getwd()
	var p problems
	for _, in := range inputs {
		src := in.Source
		if !filepath.IsAbs(src) {
			src = filepath.Join(wd, src)
		}
		if within(o, src) || within(lexical, src) {
			p.add("chunk: input file %s is inside the output directory %s; choose an output that holds no input", in.Source, show(out, o))
		}
		if p.full() {
			break
		}
	}
	return p.err()
}

// resolve returns p absolute and clean, with the symlinks of its longest
// existing prefix resolved.
func resolve(p string) string {
	abs := absolute(p)
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		if dir == filepath.Dir(dir) {
			return abs
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

func absolute(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return filepath.Clean(p)
}

// within says whether path p lies strictly inside directory dir (both
// absolute and clean).
func within(dir, p string) bool {
	if dir == p {
		return false
	}
	return dir == string(filepath.Separator) || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// show names path p as given, and where it resolves to if that differs.
func show(p, resolved string) string {
	if absolute(p) == resolved || filepath.Clean(p) == resolved {
		return p
	}
	return fmt.Sprintf("%s (%s)", p, resolved)
}
