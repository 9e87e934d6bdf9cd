package chunk

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"path/filepath"
)

// Listing is what a scan found: the files to pack, the class names and
// the layout used.
type Listing struct {
	Inputs  []Input
	Classes []string
	Layout  Layout
}

// Scan lists what pack packs: the files that manifest list names, under
// input (or the list's directory when input is ""), when list is given;
// else the files under input, laid out as layout says.
func Scan(fsys FS, input, list string, layout Layout) (Listing, error) {
	if list != "" {
		root := input
		if root == "" {
			root = filepath.Dir(list)
		}
		inputs, err := ScanManifest(fsys, list, root)
		return Listing{Inputs: inputs, Layout: "manifest"}, err
	}
	inputs, classes, layout, err := ScanDir(fsys, input, layout)
	return Listing{Inputs: inputs, Classes: classes, Layout: layout}, err
}

// Broadcaster is a Group that can also send bytes from one member to all.
type Broadcaster interface {
	Group
	// Bcast returns root's b on every member.
	Bcast(b []byte, root int) ([]byte, error)
}

// Share runs scan on member 0 only and gives its listing to every member,
// so that a shared input is listed once and every member plans the same
// dataset. A scan error on member 0 fails every member.
func Share(g Broadcaster, scan func() (Listing, error)) (Listing, error) {
	type message struct {
		Listing Listing
		Err     string
	}
	var buf bytes.Buffer
	if g.Rank() == 0 {
		l, err := scan()
		msg := message{Listing: l}
		if err != nil {
			msg.Err = err.Error()
		}
		if err := gob.NewEncoder(&buf).Encode(msg); err != nil {
			return Listing{}, fmt.Errorf("chunk: encode listing: %w", err)
		}
	}
	data, err := g.Bcast(buf.Bytes(), 0)
	if err != nil {
		return Listing{}, fmt.Errorf("chunk: share listing: %w", err)
	}
	var msg message
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&msg); err != nil {
		return Listing{}, fmt.Errorf("chunk: decode listing: %w", err)
	}
	if msg.Err != "" {
		if g.Rank() == 0 {
			return Listing{}, errors.New(msg.Err)
		}
		return Listing{}, fmt.Errorf("chunk: rank 0 could not list the input (see its message)")
	}
	return msg.Listing, nil
}

// Bcast makes Solo a Broadcaster.
func (solo) Bcast(b []byte, root int) ([]byte, error) { return b, nil }
