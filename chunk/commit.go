package chunk

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The commit renames a staged dataset into the output: retireManifest
// and retireOld move the previous dataset's entries into the temporary
// directory, then
// commitShards and commitManifest move the new ones in, the manifest
// last. rollback undoes whatever part of it was done.

// stageManifest writes the manifest into the temporary directory, where
// commitManifest renames it from: a full disk fails the pack before
// anything in the output changes.
func (p *packer) stageManifest(m *Manifest) error {
	if !p.writesManifest() {
		return nil
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("chunk: %w", err)
	}
	return writeDurable(p.cfg.FS, p.tmp, p.out, ManifestName, append(data, '\n'))
}

// retireManifest moves the old manifest into the temporary directory,
// before any process retires anything else: from then on the output does
// not look complete.
func (p *packer) retireManifest() error {
	if !p.cfg.Force || !p.writesManifest() {
		return nil
	}
	if _, err := p.cfg.FS.Stat(join(p.out, ManifestName)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return p.retire(ManifestName)
}

// retireOld moves what a previous dataset left in the output into the
// temporary directory: the rank directories this process will replace
// and, for the process writing the manifest, stale rank directories and
// the temporary directories of interrupted packs.
func (p *packer) retireOld() error {
	if !p.cfg.Force {
		return nil
	}
	entries, err := p.cfg.FS.ReadDir(p.out)
	if err != nil {
		return fmt.Errorf("chunk: %w", err)
	}
	mine := map[string]bool{}
	for _, r := range p.myShards() {
		mine[RankDir(r)] = true
	}
	for _, e := range entries {
		if n := e.Name(); n != ManifestName && p.retires(n, mine) {
			if err := p.retire(n); err != nil {
				return err
			}
		}
	}
	return nil
}

// retire moves the output's entry name into tmp/old.
func (p *packer) retire(name string) error {
	old := join(p.tmp, "old")
	if err := p.cfg.FS.MkdirAll(old); err != nil {
		return fmt.Errorf("chunk: %w", err)
	}
	if err := p.cfg.FS.Rename(join(p.out, name), join(old, name)); err != nil {
		return fmt.Errorf("chunk: %w", err)
	}
	p.retired = append(p.retired, name)
	return nil
}

func (p *packer) retires(name string, mine map[string]bool) bool {
	switch {
	case mine[name]:
		return true
	case !p.writesManifest():
		return false
	case name == ManifestName:
		return true
	case strings.HasPrefix(name, tmpPrefix):
		return !strings.HasPrefix(name, p.runPrefix) // left by an earlier run
	case strings.HasPrefix(name, "rank-"):
		var r int
		_, err := fmt.Sscanf(name, "rank-%05d", &r)
		// Shared output: rank directories beyond the new rank count.
		// Node-local output: every other rank's directory.
		return err == nil && (p.local || r >= p.plan.Ranks)
	}
	return false
}

// commitShards renames this process's staged shards into the output.
func (p *packer) commitShards() error {
	fsys := p.cfg.FS
	for _, r := range p.myShards() {
		if err := fsys.Rename(join(p.tmp, RankDir(r)), join(p.out, RankDir(r))); err != nil {
			return fmt.Errorf("chunk: %w", err)
		}
		p.committed = append(p.committed, r)
	}
	return fsys.SyncDir(p.out)
}

// commitManifest renames the staged manifest into the output.
func (p *packer) commitManifest() error {
	if !p.writesManifest() {
		return nil
	}
	if err := p.cfg.FS.Rename(join(p.tmp, ManifestName), join(p.out, ManifestName)); err != nil {
		return fmt.Errorf("chunk: %w", err)
	}
	p.manifestIn = true
	return p.cfg.FS.SyncDir(p.out)
}

// rollback undoes the commit in reverse: the new manifest leaves the
// output first, so that it never looks complete with the wrong shards,
// then the new shards; the old entries come back, and, once every
// process has put its own back, the old manifest.
func (p *packer) rollback() error {
	var errs []error
	move := func(from, to string) {
		if err := p.cfg.FS.Rename(from, to); err != nil {
			errs = append(errs, fmt.Errorf("chunk: %w", err))
		}
	}
	if p.manifestIn {
		move(join(p.out, ManifestName), join(p.tmp, ManifestName))
	}
	for _, r := range p.committed {
		move(join(p.out, RankDir(r)), join(p.tmp, RankDir(r)))
	}
	for _, n := range p.retired {
		if n != ManifestName {
			move(join(p.tmp, "old", n), join(p.out, n))
		}
	}
	if err := p.agree(errors.Join(errs...)); err != nil {
		return fmt.Errorf("chunk: could not put the previous dataset back (what was moved is in %s): %w", join(p.tmp, "old"), err)
	}
	if slices.Contains(p.retired, ManifestName) {
		move(join(p.tmp, "old", ManifestName), join(p.out, ManifestName))
	}
	return errors.Join(errs...)
}

// fail cleans up after err: it undoes the commit if it had begun, removes
// the temporary directory and, once every process has removed its own,
// the directories this process created, if empty. Where something could
// not be removed, the error says so.
func (p *packer) fail(err error) error {
	if p.committing {
		if rerr := p.rollback(); rerr != nil {
			return errors.Join(errors.New(err.Error()), rerr) // the temporary directory holds the old dataset: keep it
		}
	}
	var errs []error
	if rerr := p.cfg.FS.RemoveAll(p.tmp); rerr != nil {
		errs = append(errs, fmt.Errorf("chunk: remove %s: %w", p.tmp, rerr))
	}
	if !p.broken {
		_, _ = p.g.AllreduceSum([]int64{0}) // every process removed its temporary directory
	}
	errs = append(errs, p.removeMade()...)
	if len(errs) > 0 {
		// Not wrapped: ErrInterrupted would claim all was removed.
		return errors.Join(append([]error{errors.New(err.Error())}, errs...)...)
	}
	return err
}

// mkdirAll creates dir and its missing parents, remembering which it
// created.
func (p *packer) mkdirAll(dir string) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := p.cfg.FS.Stat(d); !errors.Is(err, os.ErrNotExist) {
			break
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	if err := p.cfg.FS.MkdirAll(dir); err != nil {
		return fmt.Errorf("chunk: output directory: %w", err)
	}
	p.made = append(p.made, missing...)
	return nil
}

// removeMade removes the directories mkdirAll created that are empty,
// the deepest first.
func (p *packer) removeMade() []error {
	slices.SortFunc(p.made, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, d := range p.made {
		entries, err := p.cfg.FS.ReadDir(d)
		if errors.Is(err, os.ErrNotExist) || err == nil && len(entries) > 0 {
			continue
		}
		if err == nil {
			err = p.cfg.FS.RemoveAll(d)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("chunk: remove %s, which pack created: %w", d, err))
		}
	}
	return errs
}
