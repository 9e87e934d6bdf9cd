// Package script parses datadriven scripts: commands with arguments,
// optional input lines, and the output each is expected to print. Tests
// run them with scripttest.RunFile; package prototest's environments
// interpret them.
package script

import (
	"fmt"
	"strings"
)

// Cmd is one command of a datadriven script:
//
//	name key=value key=v1,v2 flag
//	optional input lines
//	----
//	expected output
//
// Commands are separated by blank lines; "#" starts a comment line.
type Cmd struct {
	Pos   string // file:line
	Name  string
	Args  map[string]string
	Order []string // argument keys in the order given
	Input string
	Want  string
	// Comments are the comment lines just before the command.
	Comments []string
}

// Has reports whether the command has argument key.
func (c *Cmd) Has(key string) bool { _, ok := c.Args[key]; return ok }

// Parse parses the text of a datadriven file.
func Parse(name, text string) ([]*Cmd, error) {
	var cmds []*Cmd
	var comments []string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if strings.HasPrefix(line, "#") {
			comments = append(comments, line)
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmd := ParseLine(fmt.Sprintf("%s:%d", name, i+1), line)
		cmd.Comments, comments = comments, nil
		var in []string
		for i++; i < len(lines) && lines[i] != "----"; i++ {
			in = append(in, lines[i])
		}
		if i == len(lines) {
			return nil, fmt.Errorf("%s: command %q has no ---- line", cmd.Pos, cmd.Name)
		}
		var want []string
		for i++; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		cmd.Input, cmd.Want = strings.Join(in, "\n"), strings.Join(want, "\n")
		cmds = append(cmds, cmd)
	}
	return cmds, nil
}

// ParseLine parses one command line; pos names where it comes from.
func ParseLine(pos, line string) *Cmd {
	fields := strings.Fields(line)
	c := &Cmd{Pos: pos, Name: fields[0], Args: map[string]string{}}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		c.Args[k] = v
		c.Order = append(c.Order, k)
	}
	return c
}

// String returns the command line as written.
func (c *Cmd) String() string {
	var b strings.Builder
	b.WriteString(c.Name)
	for _, k := range c.Order {
		b.WriteByte(' ')
		b.WriteString(k)
		if v := c.Args[k]; v != "" {
			b.WriteByte('=')
			b.WriteString(v)
		}
	}
	return b.String()
}

// Write writes cmd as a script holds it, with got as its output.
func Write(out *strings.Builder, cmd *Cmd, got string) {
	for _, l := range cmd.Comments {
		fmt.Fprintln(out, l)
	}
	fmt.Fprintln(out, cmd.String())
	if cmd.Input != "" {
		fmt.Fprintln(out, cmd.Input)
	}
	fmt.Fprintln(out, "----")
	if got != "" {
		fmt.Fprintln(out, got)
	}
}
