// Package hostfiles writes a maintenance request's files (a NodeConfig's
// ConfigFiles) to the node's root file system, as mounted in lull-agent's
// pod, all or nothing.
//
// A Writer refuses, before writing anything, a path outside its allowlist
// or inside its protected paths, a path that reaches through a symbolic
// link (in any parent directory or the file itself), and a set in which
// any file has drifted: it is neither as the configuration was planned
// from nor as it will be. A file is as planned from when it has its
// previous content (ConfigFile.Previous) and the mode and owner the
// ConfigFile gives it: a ConfigFile declares no previous mode or owner,
// so a content change is taken to keep them, and a mode or owner changed
// by hand since is drift like a content changed by hand (a NodeConfig
// that changes content and mode or owner at once is refused unless the
// file already has the new mode and owner). A file to remove, and a file
// whose content stays (Previous is the new content's hash: only its mode
// or owner change), are compared by content alone. Owners are resolved
// from the node's own user and group databases, never the agent's.
//
// What is guaranteed:
//
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
//
// What is not guaranteed:
//
//   - Atomicity across a crash. If the agent process dies (or the node
//     loses power) between two renames, some files have their new content
//     and others their old one, and a hidden temporary or set-aside file
//     (".<name>.lull-tmp-…", ".<name>.lull-old-…") may be left next to
//     them. The next agent resumes: a file that already has its new
//     content, mode and owner (or, to be removed, is already gone) counts
//     as written, not as drift, so the same set applies again and
//     finishes the rest.
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
