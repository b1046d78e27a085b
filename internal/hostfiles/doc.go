// Package hostfiles writes a maintenance request's files (a NodeConfig's
// ConfigFiles) to the node's root file system, as mounted in lull-agent's
// pod, all or nothing.
//
// A Writer refuses, before writing anything, a path outside its allowlist
// or inside its protected paths, a path that reaches through a symbolic
// link (in any parent directory or the file itself), and a set in which
// any file has drifted: it is neither as the configuration was planned
// from nor as it will be. A file is as planned from when it has its
// previous content (ConfigFile.Previous) and its previous mode and
// owner: those the ConfigFile records (PreviousMode, PreviousUser,
// PreviousGroup, which kubectl lull request --write fills where the
// change gives the file another mode or owner), and where it records
// none the new ones, so that a content change is taken to keep them. A
// mode or owner changed by hand since is drift like a content changed by
// hand. A file to remove, and a file whose content stays (Previous is the
// new content's hash: only its mode or owner change) that records no
// previous mode or owner, are compared by content alone. Owners are
// resolved from the node's own user and group databases, never the
// agent's.
//
// What is guaranteed:
//
//   - No symbolic link is followed, even one swapped in mid-write. Each
//     file's directory is opened by descriptor when it is checked, every
//     name on the way opened without following a link (openat2 with
//     RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS; on a kernel without openat2,
//     openat with O_NOFOLLOW one name at a time), and everything after —
//     the drift read, the temporary file, its owner and mode, fsync, the
//     rename, the read-back, the rollback — is done relative to that
//     descriptor. Just before each rename and before the read-back the
//     directory's path is resolved again the same way and must name the
//     same directory (device and inode): a directory renamed, replaced or
//     swapped for a link (issue 41, finding 1) fails the set with ErrMoved
//     and rolls it back in the directories it changed, wherever they are
//     now. Between that check and the rename the path may still be
//     swapped; the file then lands in the directory that was checked,
//     never in the link's target.
//   - Each file is replaced atomically: its new content is written to a
//     temporary file in the same directory, given its owner and mode,
//     synced, then renamed over the file and the directory synced. A
//     reader sees the old file or the new one, never a mixture. A file
//     removed is renamed aside, and deleted once the whole set is in
//     place.
//   - The set is all or nothing for every error the agent sees: when a
//     write, a rename or the read-back (content, mode and owner of every
//     file, read again after the last rename) fails, every file already
//     changed is put back as it was (content, mode, owner; files that did
//     not exist removed, files removed restored, directories created
//     removed), and the error says which path failed and whether the
//     rollback succeeded.
//   - All or nothing across the agent's death, with a Journal. Before
//     changing anything, Apply writes to the journal directory on the
//     host (DefaultJournal, 0700) a copy of every file it replaces or
//     removes and a record of the set: each file's old and new hash,
//     mode and owner, the names of its temporary and set-aside files, the
//     directories it creates; all synced. The record is marked verified
//     once every file was read back. Recover, which lull-agent runs when
//     it starts before any step (and Apply before every set), finishes a
//     set an agent died in the middle of: rolled forward (set-aside
//     copies and temporary files deleted) when it was verified, rolled
//     back (every file put back from its copy, files created removed,
//     directories made removed) otherwise. The outcome is kept in the
//     journal (last.json: "written", "rolled back", "rolled forward").
//     A file changed by someone else since the agent died is not
//     overwritten: Recover fails, keeps the journal, and no set is
//     written until a person has looked. Once a set is verified, failing
//     to clean up is a warning (Result.Warnings), not a failure.
//
// What is not guaranteed:
//
//   - Atomicity across a crash without a Journal (Writer.Journal empty),
//     or across the loss of the node's disk: some files may have their
//     new content and others their old one, and a hidden temporary or
//     set-aside file (".<name>.lull-tmp-…", ".<name>.lull-old-…") may be
//     left next to them. Applied again, a file that already has its new
//     content, mode and owner (or, to be removed, is already gone) counts
//     as written, not as drift, so the same set finishes the rest.
//   - Readers see the set change file by file: each file is replaced
//     atomically, the set is not (a reader between two renames sees some
//     new files and some old).
//   - Attributes other than content, mode and owner. A replaced file is a
//     new inode: extended attributes, ACLs and SELinux labels of the old
//     one are not carried over (it gets its directory's defaults), and a
//     rollback restores content, mode and owner only.
//   - Files the agent may not read. lull-agent runs as root without
//     CAP_DAC_OVERRIDE: a file root may read only by overriding its
//     permissions (a 0000 /etc/shadow, a 0600 file of another user) cannot
//     be checked for drift, which is an error before anything is written.
//     Files written are read back through the descriptor they were
//     written with, so their new mode does not matter.
package hostfiles
