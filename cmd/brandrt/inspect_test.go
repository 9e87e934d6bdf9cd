package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestInspectListEscapesNames: inspect --list writes one line per file
// whatever its name holds. A name with a newline, a tab, an escape
// sequence, a backslash, a character that does not print or a leading
// double quote is written as strconv.Quote writes it, and reads back with
// strconv.Unquote; any other name as it is.
func TestInspectListEscapesNames(t *testing.T) {
	input := filepath.Join(t.TempDir(), "input")
	names := map[string]bool{ // path in the input: quoted
		"class/plain.bin": false, "class/with space.bin": false, "class/ünïcode-名前.bin": false, `class/"inner".bin`: false,
		"class/new\nline.bin": true, "class/tab\there.bin": true, "class/esc\x1b[31mred\x1b[0m.bin": true,
		"class/back\\slash.bin": true, "class/bell\a.bin": true, "class/carriage\rreturn.bin": true,
		"class/del\x7f.bin": true, "class/rtl\u202eoverride.bin": true, "class/line\u2028sep.bin": true,
		`"odd class/f.bin`: true, // a leading " would read as a quoted path
	}
	for name := range names {
		path := filepath.Join(input, name)
		err := os.MkdirAll(filepath.Dir(path), 0o755)
		if err == nil {
			err = os.WriteFile(path, []byte(name), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", dir, "--chunk-files", "4", "--shards", "1"); status != 0 {
		t.Fatalf("pack: %s", errs)
	}
	out, errs, status := runCLI(t, "inspect", "--chunks", dir, "--list")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if status != 0 || len(lines) != 1+len(names) {
		t.Fatalf("inspect --list: status %d, %d lines for %d files (%s):\n%s", status, len(lines), len(names), errs, out)
	}
	var got []string
	for _, line := range lines[1:] {
		f := strings.Split(line, "\t")
		if len(f) != 5 || strings.ContainsFunc(line, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			t.Errorf("line %q: want 5 tab-separated fields and no control character", line)
			continue
		}
		name, quoted := f[4], strings.HasPrefix(f[4], `"`)
		if quoted {
			var err error
			if name, err = strconv.Unquote(f[4]); err != nil {
				t.Errorf("line %q: %v", line, err)
			}
		}
		if want, ok := names[name]; !ok || want != quoted {
			t.Errorf("line %q names %q: quoted %v, want a file of the input, quoted %v", line, name, quoted, want)
		}
		got = append(got, name)
	}
	if slices.Sort(got); len(slices.Compact(got)) != len(names) {
		t.Errorf("listed %q, want every file once", got)
	}
}
