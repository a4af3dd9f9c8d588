//! Printable, short text for what the server logged: a command and its first arguments, cut and
//! escaped, passwords never shown.

use std::fmt::Write as _;

use crate::units::format_size;

/// Aimed-for length of a command label, characters; the last argument may pass it by its size
/// mark (`(64M)`).
pub(super) const LABEL_CHARS: usize = 40;
/// Most characters of any one argument (quotes and `...` included).
const ARG_CHARS: usize = 24;
/// An argument gets at least this much room, or the label ends with ` ...` instead.
const MIN_ARG_CHARS: usize = 6;
/// What the server keeps of a long argument before its `... (N more bytes)` mark
/// (`SLOWLOG_ENTRY_MAX_STRING`, `COMMANDLOG_ENTRY_MAX_STRING`).
const SERVER_KEPT_BYTES: usize = 128;

/// A short, printable label for a logged command: the name upper-cased, then as many of the
/// first arguments as fit in about 40 characters, each cut to 24. Bytes that are not printable
/// UTF-8 are escaped (`\xff`, `\n`); an argument with a space or a quote is quoted; one the
/// server shortened keeps its full size (`xyz...(64M)`).
pub fn command_label(args: &[Vec<u8>]) -> String {
    let Some((name, rest)) = args.split_first() else {
        return String::new();
    };
    let mut label = render_arg(&name.to_ascii_uppercase(), ARG_CHARS);
    let shown = shown_args(name, rest);
    if shown < rest.len() {
        // A password may be among the rest: never repeat it (older servers log it as sent).
        for arg in &rest[..shown] {
            label.push(' ');
            label.push_str(&render_arg(arg, ARG_CHARS));
        }
        label.push_str(" (arguments hidden)");
        return label;
    }
    for arg in rest {
        let room = LABEL_CHARS.saturating_sub(label.chars().count() + 1);
        if room < MIN_ARG_CHARS {
            label.push_str(" ...");
            break;
        }
        label.push(' ');
        label.push_str(&render_arg(arg, room.min(ARG_CHARS)));
    }
    label
}

/// How many of a command's arguments may be shown: all of them, except for the commands that
/// can carry a password (AUTH, HELLO, MIGRATE, ACL, and CONFIG SET of an `*auth*`/`*pass*`
/// setting), of which only the subcommand or setting name is.
fn shown_args(name: &[u8], rest: &[Vec<u8>]) -> usize {
    let is = |word: &[u8]| name.eq_ignore_ascii_case(word);
    if is(b"AUTH") || is(b"HELLO") || is(b"MIGRATE") {
        return 0;
    }
    if is(b"ACL") {
        return rest.len().min(1);
    }
    if is(b"CONFIG")
        && rest
            .first()
            .is_some_and(|sub| sub.eq_ignore_ascii_case(b"SET"))
        && rest.iter().skip(1).any(|arg| {
            let lower = arg.to_ascii_lowercase();
            lower.windows(4).any(|w| w == b"auth" || w == b"pass")
        })
    {
        return 1;
    }
    rest.len()
}

/// Splits off the server's `... (N more bytes)` mark: the kept bytes and the argument's full
/// size. Only a mark after exactly the 128 kept bytes counts, so an argument that merely ends
/// in those words stays as it is.
fn split_server_cut(arg: &[u8]) -> (&[u8], Option<u64>) {
    const OPEN: &[u8] = b"... (";
    const CLOSE: &[u8] = b" more bytes)";
    if arg.len() > SERVER_KEPT_BYTES + OPEN.len() + CLOSE.len() && arg.ends_with(CLOSE) {
        let (kept, mark) = arg.split_at(SERVER_KEPT_BYTES);
        if let Some(digits) = mark
            .strip_prefix(OPEN)
            .and_then(|m| m.strip_suffix(CLOSE))
            .and_then(|d| std::str::from_utf8(d).ok())
            && let Ok(more) = digits.parse::<u64>()
        {
            return (kept, Some(SERVER_KEPT_BYTES as u64 + more));
        }
    }
    (arg, None)
}

/// One argument in at most `budget` characters (plus a size mark when the server cut it).
fn render_arg(arg: &[u8], budget: usize) -> String {
    let (kept, full_size) = split_server_cut(arg);
    let quoted = kept.is_empty() || kept.iter().any(|&b| b == b' ' || b == b'"');
    let pieces = escaped_pieces(kept);
    let room = budget.saturating_sub(if quoted { 2 } else { 0 });
    let total: usize = pieces.iter().map(|p| p.chars().count()).sum();
    let cut = full_size.is_some() || total > room;
    let mut text = String::new();
    if cut {
        let room = room.saturating_sub(3);
        let mut used = 0;
        for piece in &pieces {
            let len = piece.chars().count();
            if used + len > room {
                break;
            }
            text.push_str(piece);
            used += len;
        }
        text.push_str("...");
    } else {
        pieces.iter().for_each(|p| text.push_str(p));
    }
    if quoted {
        text = format!("\"{text}\"");
    }
    if let Some(size) = full_size {
        let _ = write!(text, "({})", format_size(size));
    }
    text
}

/// Printable text for bytes from the server (escaped as in [`command_label`], never quoted).
pub fn printable(bytes: &[u8]) -> String {
    escaped_pieces(bytes).concat()
}

/// The bytes as printable pieces, one per character (so a cut never splits an escape):
/// printable UTF-8 as it is, `"` and `\` escaped, control characters and invalid bytes as
/// escapes.
fn escaped_pieces(bytes: &[u8]) -> Vec<String> {
    let mut pieces = Vec::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            pieces.push(match c {
                '"' => "\\\"".to_string(),
                '\\' => "\\\\".to_string(),
                '\n' => "\\n".to_string(),
                '\r' => "\\r".to_string(),
                '\t' => "\\t".to_string(),
                c if (c as u32) < 0x80 && c.is_control() => format!("\\x{:02x}", c as u32),
                // Controls, and the invisible marks that reorder or hide text in a terminal.
                c if c.is_control() || invisible(c) => format!("\\u{{{:x}}}", c as u32),
                c => c.to_string(),
            });
        }
        for byte in chunk.invalid() {
            pieces.push(format!("\\x{byte:02x}"));
        }
    }
    pieces
}

/// Zero-width and bidirectional formatting characters.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}
