package workspace

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Shared paths (a Project's spec.workspace.sharedPaths) are paths of the checkout, such as
// node_modules, served from one cache directory per Project instead of each checkout: prepare
// makes each of them a symlink to <SharedDir>/<path>, so the setup commands fill the cache once
// and every checkout of the Project uses it.
//
// git must never see the links: an agent that commits everything would commit them. They are
// excluded in the repository's info/exclude, in a block the runner owns. A linked worktree reads
// info/exclude from the common directory (the mirror), never from its own git dir (git-path maps
// info/ to the common dir), so in worktree mode the block is the mirror's and applies to every
// worktree of the Project: the right scope, since the shared paths are the Project's. A clone
// has its own.

// Markers of the block of info/exclude the runner owns; lines outside it are left alone.
const (
	excludeBegin = "# BEGIN shepherd spec.workspace.sharedPaths (written by the runner; edit outside this block)"
	excludeEnd   = "# END shepherd spec.workspace.sharedPaths"
)

// sharedPathRE is the API's pattern for a shared path.
var sharedPathRE = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)

// ValidateSharedPaths checks shared paths by the API's rules (relative, inside the checkout, no
// '.', '..' or '.git' part), and that none repeats or lies inside another: a link inside a link
// would live in the cache, not in the checkout.
func ValidateSharedPaths(paths []string) error {
	for i, p := range paths {
		if len(p) > 256 || !sharedPathRE.MatchString(p) {
			return fmt.Errorf("shared path %q must be a relative path of letters, digits, '.', '_', '-' and '/' (at most 256 characters)", p)
		}
		for _, part := range strings.Split(p, "/") {
			if part == "." || part == ".." || part == ".git" {
				return fmt.Errorf("shared path %q must stay inside the checkout: no '.', '..' or '.git' parts", p)
			}
		}
		for _, q := range paths[:i] {
			switch {
			case q == p:
				return fmt.Errorf("shared path %q is listed twice", p)
			case strings.HasPrefix(p, q+"/"), strings.HasPrefix(q, p+"/"):
				return fmt.Errorf("shared paths %q and %q nest; list only the outer one", q, p)
			}
		}
	}
	return nil
}

// validateShared checks the shared paths and the cache directory.
func (o *Options) validateShared() error {
	if len(o.SharedPaths) == 0 {
		return nil
	}
	if err := ValidateSharedPaths(o.SharedPaths); err != nil {
		return err
	}
	if o.SharedDir == "" || !filepath.IsAbs(o.SharedDir) {
		return fmt.Errorf("shared paths need an absolute shared directory (the links point at it), got %q", o.SharedDir)
	}
	dir, path := filepath.Clean(o.SharedDir), filepath.Clean(o.Path)
	if within(dir, path) || within(path, dir) {
		return fmt.Errorf("the shared directory %s and the checkout %s must not contain each other", dir, path)
	}
	return nil
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// excludeFile is the info/exclude git reads for the checkout: its own, in either mode (a
// worktree-mode checkout is a repository of its own that borrows the mirror's objects only).
func (o *Options) excludeFile(gitDir string) string {
	return filepath.Join(gitDir, "info", "exclude")
}

// shareCheckout links the checkout's shared paths to the cache and keeps git from seeing them;
// it removes this checkout's links of paths no longer shared. It is idempotent: a link that is
// in place is left alone. What is in the checkout where a link belongs:
//   - files git tracks: refused, nothing is changed (the path cannot be shared);
//   - the link already: kept;
//   - anything else (a directory a setup command filled before the path was shared, a file, a
//     symlink elsewhere): moved, not deleted, to <gitdir>/shepherd/unshared/<path>, then linked.
func shareCheckout(ctx context.Context, g *Git, o Options, gitDir string, log io.Writer) error {
	exclude := o.excludeFile(gitDir)
	recordPath := filepath.Join(StateDir(gitDir), "shared.json")
	rec, err := readSharedRecord(recordPath)
	if err != nil {
		return err
	}
	if len(o.SharedPaths) == 0 && len(rec.Paths) == 0 {
		// The usual case costs two reads: was anything shared before?
		if old, err := readExcludeBlock(exclude); err != nil || len(old) == 0 {
			return err
		}
	}
	old, err := readExcludeBlock(exclude)
	if err != nil {
		return err
	}
	if len(o.SharedPaths) > 0 {
		if err := checkLinkable(ctx, g, o); err != nil {
			return err
		}
	}
	// Exclusions and the record first, links second: a link never exists unexcluded or
	// unrecorded.
	if err := writeExcludeBlock(exclude, union(old, o.SharedPaths)); err != nil {
		return err
	}
	if err := writeSharedRecord(recordPath, sharedRecord{Dir: o.SharedDir, Paths: union(rec.Paths, o.SharedPaths)}); err != nil {
		return err
	}
	for _, p := range rec.Paths {
		kept := slices.Contains(o.SharedPaths, p)
		if (kept && rec.Dir == o.SharedDir) || !isLinkTo(filepath.Join(o.Path, p), filepath.Join(rec.Dir, p)) {
			continue
		}
		// No longer shared, or shared from another directory: the link is ours to remove.
		if err := os.Remove(filepath.Join(o.Path, p)); err != nil {
			return fmt.Errorf("unlink %s: %w", p, err)
		}
		if !kept {
			fmt.Fprintf(log, "shared path %s: no longer shared, link removed (the cache keeps its content)\n", p)
		}
	}
	for _, p := range o.SharedPaths {
		if err := linkShared(o, gitDir, p, log); err != nil {
			return err
		}
	}
	if len(o.SharedPaths) > 0 {
		if err := checkIgnored(ctx, g, o); err != nil {
			return err
		}
	}
	if err := writeSharedRecord(recordPath, sharedRecord{Dir: o.SharedDir, Paths: o.SharedPaths}); err != nil {
		return err
	}
	// The exclusion of a path no longer shared stays while the checkout still has a link there
	// (someone else's, not ours to remove): otherwise a running agent would see and commit it.
	keep := slices.Clone(o.SharedPaths)
	for _, p := range old {
		if !slices.Contains(keep, p) && isSymlink(filepath.Join(o.Path, p)) {
			keep = append(keep, p)
		}
	}
	return writeExcludeBlock(exclude, keep)
}

func isSymlink(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}

// sharedRecord is what a checkout links: kept in its state dir, so that a later prepare knows
// which links are its own to remove when a path is no longer shared.
type sharedRecord struct {
	Dir   string   `json:"dir,omitempty"`
	Paths []string `json:"paths,omitempty"`
}

func readSharedRecord(path string) (sharedRecord, error) {
	var rec sharedRecord
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("read %s: %w", path, err)
	}
	return rec, nil
}

func writeSharedRecord(path string, rec sharedRecord) error {
	if len(rec.Paths) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// checkLinkable refuses, before anything changes, a shared path under a symlink or a file of the
// checkout, or one git tracks files under.
func checkLinkable(ctx context.Context, g *Git, o Options) error {
	pathspecs := []string{"ls-files", "-z", "--"}
	for _, p := range o.SharedPaths {
		parts := strings.Split(p, "/")
		for i := 1; i < len(parts); i++ {
			parent := filepath.Join(o.Path, filepath.Join(parts[:i]...))
			fi, err := os.Lstat(parent)
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if err != nil {
				return fmt.Errorf("shared path %s: %w", p, err)
			}
			if !fi.IsDir() {
				return fmt.Errorf("shared path %s: %s is not a directory in the checkout (a symlink or a file); a shared path must lie under real directories", p, strings.Join(parts[:i], "/"))
			}
		}
		pathspecs = append(pathspecs, ":(literal)"+p)
	}
	out, err := g.Run(ctx, o.Path, pathspecs...)
	if err != nil {
		return err
	}
	tracked := map[string][]string{}
	for _, f := range strings.Split(out, "\x00") {
		for _, p := range o.SharedPaths {
			if f == p || strings.HasPrefix(f, p+"/") {
				tracked[p] = append(tracked[p], f)
			}
		}
	}
	var msgs []string
	for _, p := range o.SharedPaths {
		if files := tracked[p]; len(files) > 0 {
			example := files[0]
			if len(files) > 1 {
				example += fmt.Sprintf(" and %d more", len(files)-1)
			}
			msgs = append(msgs, fmt.Sprintf("%s (%s)", p, example))
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("shared paths hold files git tracks on this branch: %s; a shared path must be untracked: remove it from spec.workspace.sharedPaths, or stop tracking it (git rm -r --cached) and ignore it",
			strings.Join(msgs, ", "))
	}
	return nil
}

// linkShared makes the checkout's path p a symlink to the cache, creating the cache directory.
func linkShared(o Options, gitDir, p string, log io.Writer) error {
	target := filepath.Join(o.SharedDir, p)
	at := filepath.Join(o.Path, p)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("create shared directory %s: %w", target, err)
	}
	if isLinkTo(at, target) {
		return nil
	}
	switch fi, err := os.Lstat(at); {
	case err == nil && fi.IsDir() && os.Remove(at) == nil:
		// An empty directory: nothing to keep.
	case err == nil:
		aside, err := moveAside(at, filepath.Join(StateDir(gitDir), "unshared", p))
		if err != nil {
			return fmt.Errorf("shared path %s: move what the checkout held there aside: %w", p, err)
		}
		fmt.Fprintf(log, "shared path %s: the checkout held untracked content there; moved it to %s (nothing was deleted)\n", p, aside)
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("shared path %s: %w", p, err)
	}
	if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
		return fmt.Errorf("shared path %s: %w", p, err)
	}
	if err := os.Symlink(target, at); err != nil {
		return fmt.Errorf("shared path %s: link to the cache: %w", p, err)
	}
	fmt.Fprintf(log, "shared path %s: linked to %s\n", p, target)
	return nil
}

// moveAside renames path to dest, or dest.1, dest.2… when taken, and returns where it went.
func moveAside(path, dest string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return "", err
	}
	for i := 0; ; i++ {
		to := dest
		if i > 0 {
			to = dest + "." + strconv.Itoa(i)
		}
		if _, err := os.Lstat(to); errors.Is(err, os.ErrNotExist) {
			return to, os.Rename(path, to)
		} else if err != nil {
			return "", err
		}
	}
}

// isLinkTo reports whether path is a symlink to target.
func isLinkTo(path, target string) bool {
	dest, err := os.Readlink(path)
	return err == nil && dest == target
}

// checkIgnored makes sure git ignores every link. info/exclude ranks below the repository's own
// .gitignore files, which could re-include a path with '!'. A link git would see is removed
// again, so that no agent commits it.
func checkIgnored(ctx context.Context, g *Git, o Options) error {
	args := []string{"status", "--porcelain", "-z", "--untracked-files=all", "--"}
	for _, p := range o.SharedPaths {
		args = append(args, ":(literal)"+p)
	}
	out, err := g.Run(ctx, o.Path, args...)
	if err != nil {
		return err
	}
	var seen []string
	for _, entry := range strings.Split(out, "\x00") {
		if len(entry) < 4 {
			continue
		}
		p := entry[3:]
		seen = append(seen, p)
		if slices.Contains(o.SharedPaths, p) && isLinkTo(filepath.Join(o.Path, p), filepath.Join(o.SharedDir, p)) {
			if err := os.Remove(filepath.Join(o.Path, p)); err != nil {
				return fmt.Errorf("shared path %s: git sees the link, and removing it failed: %w", p, err)
			}
		}
	}
	if len(seen) > 0 {
		return fmt.Errorf("git does not ignore the shared paths %s: a .gitignore of the repository re-includes them with '!'; remove that rule, or the paths from spec.workspace.sharedPaths",
			strings.Join(seen, ", "))
	}
	return nil
}

// readExcludeBlock returns the paths in the runner's block of an exclude file.
func readExcludeBlock(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	_, block, _ := splitExclude(b)
	return block, nil
}

// splitExclude separates an exclude file into the lines outside the runner's block and the
// paths inside it, and says whether the block is there.
func splitExclude(b []byte) (outside, block []string, found bool) {
	in := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == excludeBegin:
			in, found = true, true
		case line == excludeEnd && in:
			in = false
		case in:
			if p, ok := strings.CutPrefix(line, "/"); ok && p != "" {
				block = append(block, p)
			}
		default:
			outside = append(outside, line)
		}
	}
	return outside, block, found
}

// writeExcludeBlock sets the runner's block of an exclude file to paths (anchored at the root;
// no trailing slash, which would match directories only and never a symlink), leaving the other
// lines alone. It writes only on a change, through a rename.
func writeExcludeBlock(file string, paths []string) error {
	old, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", file, err)
	}
	outside, _, found := splitExclude(old)
	if len(paths) == 0 && !found {
		return nil
	}
	var b strings.Builder
	for _, line := range outside {
		b.WriteString(line + "\n")
	}
	if len(paths) > 0 {
		sorted := slices.Clone(paths)
		slices.Sort(sorted)
		b.WriteString(excludeBegin + "\n")
		for _, p := range slices.Compact(sorted) {
			b.WriteString("/" + p + "\n")
		}
		b.WriteString(excludeEnd + "\n")
	}
	if b.String() == string(old) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(file), err)
	}
	tmp := file + ".shepherd.tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("replace %s: %w", file, err)
	}
	return nil
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, p := range b {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}
