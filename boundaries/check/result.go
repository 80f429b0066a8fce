package check

import "time"

// Kind names what happened to a protected path.
type Kind string

// Violation kinds.
const (
	// KindModified: the content differs from the base (after CRLF/LF normalisation).
	KindModified Kind = "modified"
	// KindAdded: a path that the base lacks (staged, committed or untracked).
	KindAdded Kind = "added"
	// KindDeleted: a base path missing from the index or the working tree.
	KindDeleted Kind = "deleted"
	// KindRenamed: a base path deleted while its exact content appears at another path.
	KindRenamed Kind = "renamed"
	// KindMode: the executable bit changed.
	KindMode Kind = "mode"
	// KindType: the kind of entry changed (file, symlink, submodule, folder).
	KindType Kind = "type"
	// KindSymlink: a symbolic link points somewhere else.
	KindSymlink Kind = "symlink"
	// KindSubmodule: a submodule records or has checked out another commit.
	KindSubmodule Kind = "submodule"
	// KindConflict: the index holds an unresolved merge conflict.
	KindConflict Kind = "conflict"
	// KindAllowedEdit: a file with allowed edits differs by more (or less) than them.
	KindAllowedEdit Kind = "allowed-edit"
	// KindMissing: a file with allowed edits exists neither in the base nor in the tree.
	KindMissing Kind = "missing"
)

// Where a change was seen.
const (
	// InIndex: the index (staged or committed) differs from the base.
	InIndex = "index"
	// InWorktree: a tracked file on disk differs from the base.
	InWorktree = "worktree"
	// InUntracked: an untracked, not ignored file on disk.
	InUntracked = "untracked"
)

// Violation is one broken promise.
type Violation struct {
	// Path is the repository path, slash-separated.
	Path string `json:"path"`
	// Kind says what changed.
	Kind Kind `json:"kind"`
	// Where lists the places the change was seen: index, worktree, untracked.
	Where []string `json:"where"`
	// ProtectedBy lists the policy entries (or "allowed_edits") that cover Path.
	ProtectedBy []string `json:"protected_by"`
	// Detail is one line for people.
	Detail string `json:"detail"`
	// RenamedTo is the new path of a renamed file.
	RenamedTo string `json:"renamed_to,omitempty"`
	// Diff is a unified diff of the change (what else changed, for an allowed edit).
	Diff string `json:"diff,omitempty"`
}

// EntryResult is the verdict for one protected entry.
type EntryResult struct {
	// Spec is the entry as written in the policy.
	Spec string `json:"spec"`
	// Kind is path, folder or glob; Resolved says what a path turned out to be.
	Kind string `json:"kind"`
	// Resolved is file, folder, symlink, submodule, glob or absent.
	Resolved string `json:"resolved"`
	// Verdict is unchanged, changed or absent.
	Verdict string `json:"verdict"`
	// Files is the number of paths compared under the entry.
	Files int `json:"files_checked"`
	// Violations is the number of violations under the entry.
	Violations int `json:"violations"`
}

// BlockResult is how one allowed block was found.
type BlockResult struct {
	// Name labels the block.
	Name string `json:"name"`
	// Source is "inline" or the block file.
	Source string `json:"source"`
	// InBase and InTree count the block's occurrences.
	InBase int `json:"in_base"`
	InTree int `json:"in_tree"`
	// Status is inserted, in-base, absent-optional, missing, duplicated,
	// removed, or not-checked when the file itself is missing or of another type.
	Status string `json:"status"`
}

// EditResult is the verdict for one file with allowed edits.
type EditResult struct {
	// Path is the file.
	Path string `json:"path"`
	// Verdict is inserted (the blocks were inserted once, nothing else changed),
	// unchanged (the file equals the base, which already holds the blocks) or failed.
	Verdict string `json:"verdict"`
	// Blocks has one entry per allowed block.
	Blocks []BlockResult `json:"blocks"`
}

// Repository describes the checked repository's state.
type Repository struct {
	// Root is the working tree's root folder.
	Root string `json:"root"`
	// Head is the commit HEAD points at ("" in a repository without commits).
	Head string `json:"head"`
	// Branch is the checked out branch, "" when HEAD is detached.
	Branch string `json:"branch"`
	// Staged, Unstaged and Untracked count violations seen in each place.
	Staged    int `json:"staged_changes"`
	Unstaged  int `json:"unstaged_changes"`
	Untracked int `json:"untracked_files"`
}

// Result is the outcome of one check.
type Result struct {
	// BaseRef is the revision as given; RefCommit the commit it resolved to;
	// BaseCommit the commit compared with: RefCommit, or with MergeBase set,
	// the merge base of RefCommit and HEAD.
	BaseRef    string
	RefCommit  string
	BaseCommit string
	MergeBase  bool
	// Repo describes the working tree.
	Repo Repository
	// Entries has one verdict per protected entry, in policy order.
	Entries []EntryResult
	// Edits has one verdict per file with allowed edits.
	Edits []EditResult
	// Violations lists every violation, sorted by path.
	Violations []Violation
	// Files is the number of distinct paths compared.
	Files int
	// Elapsed is the time the check took.
	Elapsed time.Duration
	// PolicyChanged is true when the policy file (or a block file) in the
	// working tree differs from the base's copy; PolicyInBase says whether the
	// base has one at all.
	PolicyChanged bool
	PolicyInBase  bool
}

// OK reports whether the boundary holds.
func (r *Result) OK() bool { return len(r.Violations) == 0 }
