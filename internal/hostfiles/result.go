package hostfiles

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Result is what Apply did, file by file in the order given.
type Result struct {
	Files []FileResult
	// Warnings are what went wrong after the set was written and
	// verified (cleaning up), or what an earlier set left unfinished was
	// recovered to: not failures.
	Warnings []string
}

// FileResult is one file's outcome.
type FileResult struct {
	Path string
	// SHA256 is the file's new content's; empty for a file removed.
	SHA256 string
	// Removed: the file is gone (Absent).
	Removed bool
	// Written: Apply changed the file; false: it was already in place
	// (content, mode and owner), as after an agent that stopped mid-set.
	Written bool
}

// maxSummary keeps Summary within a status message.
const maxSummary = 900

// Summary is the result in one line of at most about 900 bytes:
// "3 files written and verified: /etc/a (sha256 1a2b3c4d…), /etc/b
// (removed), /etc/c (sha256 5e6f7a8b…, already in place)", and the
// warnings after "; warning: ".
func (r Result) Summary() string {
	written := 0
	for _, f := range r.Files {
		if f.Written {
			written++
		}
	}
	inPlace := len(r.Files) - written
	var head string
	switch {
	case len(r.Files) == 0:
		return "no files"
	case inPlace == 0:
		head = countFiles(written) + " written and verified"
	case written == 0:
		head = countFiles(inPlace) + " already in place"
	default:
		head = fmt.Sprintf("%s written and verified, %d already in place", countFiles(written), inPlace)
	}
	items := make([]string, len(r.Files))
	for i, f := range r.Files {
		items[i] = f.String()
	}
	var warn string
	if len(r.Warnings) > 0 {
		warn = truncate("; warning: "+strings.Join(r.Warnings, "; "), maxSummary/3)
	}
	return joinCapped(head+": ", items, maxSummary-len(warn)) + warn
}

// String is the file as Summary lists it: "/etc/a (sha256 1a2b3c4d…)".
func (f FileResult) String() string {
	var what string
	switch {
	case f.Removed && f.Written:
		return f.Path + " (removed)"
	case f.Removed:
		return f.Path + " (already absent)"
	case len(f.SHA256) > 8:
		what = "sha256 " + f.SHA256[:8] + "…"
	default:
		what = "sha256 " + f.SHA256
	}
	if !f.Written {
		what += ", already in place"
	}
	return f.Path + " (" + what + ")"
}

func countFiles(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}

// joinCapped joins items after head with ", ", as many as fit in limit
// bytes with "… and N more" for the rest; the first is listed even if it
// has to be cut short.
func joinCapped(head string, items []string, limit int) string {
	var b strings.Builder
	b.WriteString(head)
	for i, it := range items {
		sep := ""
		if i > 0 {
			sep = ", "
		}
		reserve := 0
		if rest := len(items) - i - 1; rest > 0 {
			reserve = len(moreText(rest))
		}
		if room := limit - b.Len() - len(sep) - reserve; len(it) > room {
			if i > 0 {
				b.WriteString(moreText(len(items) - i))
				break
			}
			it = truncate(it, room)
		}
		b.WriteString(sep + it)
	}
	return truncate(b.String(), limit)
}

func moreText(n int) string { return fmt.Sprintf(" … and %d more", n) }

// truncate cuts s to at most limit bytes on a rune boundary, marking the cut
// with "…".
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const ell = "…"
	cut := limit - len(ell)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut <= 0 {
		return ""
	}
	return s[:cut] + ell
}

// Drift is a file that is neither as the configuration was planned from
// (its previous content, with the mode and owner the configuration gives
// it) nor as it will be: its content, its mode or its owner differ.
type Drift struct {
	Path string
	// Want is the content's expected SHA-256 (ConfigFile.Previous) or
	// "absent"; Got the SHA-256 found on disk or "absent". They are equal
	// when the content is one the file may have and only its mode or
	// owner differ.
	Want, Got string
	// Mode and Owner are what else differs: nil when it does not.
	Mode, Owner *Mismatch
}

// Mismatch is an attribute a file was expected to have and the one it
// has: a mode in octal ("0644"), an owner as "uid:gid".
type Mismatch struct {
	Want, Got string
}

// String says which of content, mode and owner differ: "/etc/a: content
// differs (expected sha256 …, found absent)", "/etc/b: mode differs
// (expected 0644, found 0600), owner differs (expected 0:0, found
// 1000:1000)".
func (d Drift) String() string {
	var parts []string
	add := func(what, want, got string) {
		parts = append(parts, fmt.Sprintf("%s differs (expected %s, found %s)", what, want, got))
	}
	if d.Want != d.Got {
		add("content", hashOrAbsent(d.Want), hashOrAbsent(d.Got))
	}
	if d.Mode != nil {
		add("mode", d.Mode.Want, d.Mode.Got)
	}
	if d.Owner != nil {
		add("owner", d.Owner.Want, d.Owner.Got)
	}
	return d.Path + ": " + strings.Join(parts, ", ")
}

func hashOrAbsent(h string) string {
	if h == absent {
		return h
	}
	return "sha256 " + h
}

// absent is how Drift spells a missing file.
const absent = "absent"

// DriftError is a set that was not written because files drifted: every
// one of them, in the order given.
type DriftError struct {
	Drifts []Drift
}

func (e *DriftError) Error() string {
	parts := make([]string, len(e.Drifts))
	for i, d := range e.Drifts {
		parts[i] = d.String()
	}
	return fmt.Sprintf("%s drifted (neither as the configuration was planned from nor as it will be), nothing written: %s",
		countFiles(len(e.Drifts)), strings.Join(parts, "; "))
}

// RefusedError is a file the Writer will not write, and the rule that
// says so; nothing was written.
type RefusedError struct {
	Path string
	Rule string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refusing to write %s: %s; nothing written", e.Path, e.Rule)
}

// ErrReadBack is wrapped by the error of a file that, read back after the
// last rename, is not what was written.
var ErrReadBack = errors.New("read back differs")

// WriteError is a set that failed while being written or verified, after
// the checks passed, and what became of the rollback.
type WriteError struct {
	// Path is the file whose write, rename or read-back failed.
	Path string
	Err  error
	// Rollback is nil when every file changed was put back as it was.
	Rollback error
}

func (e *WriteError) Error() string {
	if e.Rollback == nil {
		return fmt.Sprintf("writing %s: %v; rolled back, every file is as it was", e.Path, e.Err)
	}
	return fmt.Sprintf("writing %s: %v; ROLLBACK FAILED, files may be left half-changed: %v", e.Path, e.Err, e.Rollback)
}

func (e *WriteError) Unwrap() []error {
	if e.Rollback == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Rollback}
}

// rolledBack reports whether every file changed was put back.
func (e *WriteError) rolledBack() bool { return e.Rollback == nil }
