//! Lockfiles on disk: the files a requirements file includes, read from the
//! file system and confined to an include root.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use super::{IncludeError, MAX_LOCKFILE_BYTES, ParseError, ParseErrorCode, Parsed};

/// How many symbolic links one include may pass through (Linux's own limit).
const MAX_SYMLINKS: usize = 40;

/// Parses the lockfile at `path`, whose `bytes` the caller has read, and
/// reads the files a requirements file includes (`-r`, `-c`) from disk.
/// Errors name the lockfile as `path` displays.
///
/// Includes are confined to the include root: `root` when given, else the
/// lockfile's own directory, and everything below it. An include outside it
/// is `include_outside_root`, with the same error whether or not its target
/// exists, and nothing outside the root is ever opened or looked at:
///
/// - absolute paths, URLs and paths that lead out of the root, resolved
///   lexically against the root's canonical path, are refused as written,
///   before the disk is touched (see [`parse_with`](super::parse_with)); one
///   that climbs above the root and comes straight back in through the
///   root's own name (`./../pip/other.txt` from `pip/`) is read;
/// - the rest is resolved one component at a time from the root's canonical
///   path, following symbolic links by hand: a link whose target leaves the
///   root (an absolute target elsewhere, or `..` above the root, even one
///   that would come back in) is refused at that link.
///
/// An include that stays inside but cannot be read (missing, a directory,
/// larger than [`MAX_LOCKFILE_BYTES`], not UTF-8) is `include_failed`. With
/// an explicit `root` the lockfile's directory must lie inside it
/// (`include_outside_root` otherwise), and includes may climb with `..` as
/// far as the root. Files that change while they are read are out of scope:
/// the checkout is taken to hold still.
pub fn parse_file(path: &Path, bytes: &[u8], root: Option<&Path>) -> Result<Parsed, ParseError> {
    let file = path.display().to_string();
    let error = |code, message: String| ParseError { code, file: file.clone(), line: None, message };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // The root is resolved once, and only needed when an include is read.
    let (root, within): (Result<PathBuf, std::io::ErrorKind>, Vec<OsString>) = match root {
        None => (std::fs::canonicalize(dir).map_err(|e| e.kind()), Vec::new()),
        Some(root) => {
            let resolve = |p: &Path, what: &str| {
                std::fs::canonicalize(p).map_err(|e| {
                    error(ParseErrorCode::IncludeFailed, format!("cannot resolve the {what}: {}", e.kind()))
                })
            };
            let root = resolve(root, "include root")?;
            let dir = resolve(dir, "lockfile's directory")?;
            let below = dir.strip_prefix(&root).map_err(|_| {
                error(
                    ParseErrorCode::IncludeOutsideRoot,
                    "the lockfile is not inside the include root".into(),
                )
            })?;
            let within = below.components().map(|c| c.as_os_str().to_owned()).collect();
            (Ok(root), within)
        }
    };
    let within_text: String =
        within.iter().map(|c| format!("{}/", c.to_string_lossy())).collect::<Vec<_>>().concat();
    let mut reader = |name: &str| -> Result<String, IncludeError> {
        let root = root
            .as_ref()
            .map_err(|e| IncludeError::Failed(format!("cannot resolve the lockfile's directory: {e}")))?;
        let target = resolve_inside(root, &within, name)?;
        read_text(&target).map_err(IncludeError::Failed)
    };
    // The root's canonical path (when it is UTF-8): what an include that
    // climbs above the root may come back in through, read lexically.
    let root_text = root.as_ref().ok().and_then(|r| r.to_str()).map(str::to_owned);
    super::parse_within(&file, bytes, Some(&mut reader), root_text.as_deref(), &within_text)
}

/// The real path of `name` (relative to the directory `within` below
/// `root`), resolved without leaving `root` (canonical), or why not.
/// Every path looked at lies inside `root`.
fn resolve_inside(root: &Path, within: &[OsString], name: &str) -> Result<PathBuf, IncludeError> {
    let mut pending: VecDeque<OsString> = within.iter().cloned().collect();
    pending.extend(parts(Path::new(name))?);
    let mut at = root.to_path_buf();
    let mut depth = 0usize;
    let mut links = 0usize;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            // `at` holds no symbolic link, so its parent is the real one.
            depth = depth.checked_sub(1).ok_or(IncludeError::OutsideRoot)?;
            at.pop();
            continue;
        }
        let next = at.join(&part);
        let meta =
            std::fs::symlink_metadata(&next).map_err(|e| IncludeError::Failed(e.kind().to_string()))?;
        if !meta.file_type().is_symlink() {
            at = next;
            depth += 1;
            continue;
        }
        links += 1;
        if links > MAX_SYMLINKS {
            return Err(IncludeError::Failed("too many levels of symbolic links".into()));
        }
        let target = std::fs::read_link(&next).map_err(|e| IncludeError::Failed(e.kind().to_string()))?;
        let rest = if target.is_absolute() {
            let below = target.strip_prefix(root).map_err(|_| IncludeError::OutsideRoot)?;
            at = root.to_path_buf();
            depth = 0;
            parts(below)?
        } else {
            // Relative to the link's directory, which is `at`.
            parts(&target)?
        };
        for part in rest.into_iter().rev() {
            pending.push_front(part);
        }
    }
    if depth == 0 {
        return Err(IncludeError::Failed("not a file".into()));
    }
    Ok(at)
}

/// A relative path's components (`.` dropped, `..` kept); a root or a
/// drive in it means it leads outside.
fn parts(path: &Path) -> Result<Vec<OsString>, IncludeError> {
    path.components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(p) => Ok(p.to_owned()),
            Component::ParentDir => Ok(OsString::from("..")),
            _ => Err(IncludeError::OutsideRoot),
        })
        .collect()
}

/// A regular file's text, within the size limit.
fn read_text(path: &Path) -> Result<String, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| e.kind().to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let limit = MAX_LOCKFILE_BYTES as u64;
    if meta.len() > limit {
        return Err(format!("larger than {MAX_LOCKFILE_BYTES} bytes"));
    }
    let mut text = String::new();
    std::fs::File::open(path).and_then(|f| f.take(limit + 1).read_to_string(&mut text)).map_err(
        |e| match e.kind() {
            std::io::ErrorKind::InvalidData => "not UTF-8".to_owned(),
            kind => kind.to_string(),
        },
    )?;
    Ok(text)
}
