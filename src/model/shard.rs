//! `shardSelector` (KEP-5866, kube-apiserver 1.36 alpha behind `ShardedListAndWatch`): an object
//! belongs to a shard when the 64-bit FNV-1a hash of one of its metadata fields falls in one of
//! the selector's ranges.
//!
//! The wire form is the CEL subset upstream accepts (`k8s.io/apiserver/pkg/sharding.Parse`):
//! `shardRange(PATH, 'START', 'END')` calls joined by `||`, parentheses allowed, nothing else.
//! PATH is `object.metadata.uid` or `object.metadata.namespace`, the same in every call. START
//! and END are `0x` and exactly 16 lowercase hex digits (END may be `0x10000000000000000`,
//! 2^64); START is inclusive, END exclusive, START < END. Upstream parses with cel-go and walks the
//! tree; this parser accepts the same language without a CEL dependency and reports the byte
//! position of each problem, with upstream's messages.
//!
//! ## Invariants
//! - [`ShardSelector::ranges`] are sorted, disjoint and non-adjacent (overlapping or touching
//!   ranges of the expression are merged), so a hash falls in at most one of them: a router may
//!   register a watcher under each range and still offer an event to it at most once.
// Reads outside input (a request's query): no panicking access (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice
    )
)]

use std::fmt;

use crate::error::Error;

/// FNV-1a, 64 bits (Go's `hash/fnv.New64a`): the hash upstream shards by.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// The metadata field a shard selector hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardKey {
    /// `object.metadata.uid`.
    Uid,
    /// `object.metadata.namespace` (`""` for cluster-scoped objects).
    Namespace,
}

impl ShardKey {
    /// The CEL path, as written in the selector.
    pub fn path(self) -> &'static str {
        match self {
            ShardKey::Uid => "object.metadata.uid",
            ShardKey::Namespace => "object.metadata.namespace",
        }
    }
}

/// A half-open range of hashes `[start, end)`; `end` is at most 2^64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardRange {
    /// Inclusive.
    pub start: u64,
    /// Exclusive; `1 << 64` is the top of the hash space.
    pub end: u128,
}

impl ShardRange {
    /// Whether `hash` is in the range.
    pub fn contains(&self, hash: u64) -> bool {
        hash >= self.start && u128::from(hash) < self.end
    }
}

/// A parsed `shardSelector`: one field and the hash ranges it accepts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShardSelector {
    key: ShardKey,
    /// Sorted, disjoint, not touching (see the module's invariants).
    ranges: Vec<ShardRange>,
    /// Upstream's canonical form (`sharding.Selector.String()`), echoed in a list's `shardInfo`.
    canonical: String,
}

/// A `shardSelector` that did not parse: the byte position and upstream's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSelectorError {
    position: usize,
    message: String,
}

impl ShardSelectorError {
    fn at(position: usize, message: impl Into<String>) -> Self {
        ShardSelectorError {
            position,
            message: message.into(),
        }
    }

    /// The byte offset in the (untrimmed) parameter where the problem is.
    pub fn position(&self) -> usize {
        self.position
    }

    /// What was wrong, in upstream's words where upstream has them.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ShardSelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Upstream's wrapping (`registry.Store`: "invalid shard selector: %w"), then where.
        write!(
            f,
            "invalid shard selector: {} (at position {})",
            self.message, self.position
        )
    }
}

impl std::error::Error for ShardSelectorError {}

impl From<ShardSelectorError> for Error {
    fn from(e: ShardSelectorError) -> Self {
        Error::bad_request_from(e)
    }
}

/// The longest selector read; a longer one is refused before parsing (bounded cost). It is also
/// the cap on the number of ranges: at most [`MAX_SHARD_RANGES`] calls fit. Upstream has no
/// cap of either kind (`sharding.Parse` walks any number of `||` calls; only the request line's
/// length bounds them), so a selector longer than this is one upstream would take and this server
/// refuses, with 400 BadRequest saying so.
pub(crate) const MAX_SHARD_SELECTOR_LEN: usize = 16 * 1024;

/// The shortest `shardRange` call: no spaces, the shorter path.
const SHORTEST_CALL: &str =
    "shardRange(object.metadata.uid,'0x0000000000000000','0x0000000000000001')";

/// The most `shardRange` calls (hence ranges) a selector of [`MAX_SHARD_SELECTOR_LEN`] bytes can
/// hold: n calls joined by `||` take at least `73n + 2(n - 1)` bytes, so 218. A watcher's routing
/// cost is one entry per range (`cache/shard_router.rs`), so this bounds it too.
pub(crate) const MAX_SHARD_RANGES: usize = (MAX_SHARD_SELECTOR_LEN + 2) / (SHORTEST_CALL.len() + 2);

impl ShardSelector {
    /// Parses the wire form.
    ///
    /// # Errors
    /// [`ShardSelectorError`] with the position and upstream's message.
    pub fn parse(input: &str) -> Result<ShardSelector, ShardSelectorError> {
        if input.len() > MAX_SHARD_SELECTOR_LEN {
            return Err(ShardSelectorError::at(
                MAX_SHARD_SELECTOR_LEN,
                format!(
                    "shard selector is {} bytes long; the limit is {MAX_SHARD_SELECTOR_LEN} \
                     (at most {MAX_SHARD_RANGES} shardRange calls)",
                    input.len()
                ),
            ));
        }
        let trimmed = input.trim_start();
        let offset = input.len() - trimmed.len();
        if trimmed.trim_end().is_empty() {
            return Err(ShardSelectorError::at(
                offset,
                "empty shard selector is not allowed; omit the parameter for unfiltered lists",
            ));
        }
        let tokens = lex(input)?;
        let mut p = Parser {
            tokens: &tokens,
            at: 0,
            end: input.len(),
            depth: 0,
        };
        let calls = p.or_expr()?;
        if let Some(t) = p.peek() {
            return Err(ShardSelectorError::at(
                t.at,
                format!(
                    "CEL parse error: Syntax error: extraneous input {}",
                    t.tok.describe()
                ),
            ));
        }
        let Some(first) = calls.first() else {
            return Err(ShardSelectorError::at(offset, "no shardRange() call"));
        };
        let key = first.key;
        if let Some(other) = calls.iter().find(|c| c.key != key) {
            return Err(ShardSelectorError::at(
                other.at,
                format!(
                    "all shard ranges must use the same field, got \"{}\" and \"{}\"",
                    key.path(),
                    other.key.path()
                ),
            ));
        }
        let canonical = calls
            .iter()
            .map(|c| {
                format!(
                    "shardRange({}, '{}', '{}')",
                    c.key.path(),
                    c.start_text,
                    c.end_text
                )
            })
            .collect::<Vec<_>>()
            .join(" || ");
        let mut ranges: Vec<ShardRange> = calls.iter().map(|c| c.range).collect();
        ranges.sort_unstable();
        let mut merged: Vec<ShardRange> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(last) if u128::from(r.start) <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        Ok(ShardSelector {
            key,
            ranges: merged,
            canonical,
        })
    }

    /// The field hashed.
    pub fn key(&self) -> ShardKey {
        self.key
    }

    /// The accepted ranges: sorted, disjoint and not touching.
    pub fn ranges(&self) -> &[ShardRange] {
        &self.ranges
    }

    /// Whether a hash of the key field is in one of the ranges.
    pub fn contains(&self, hash: u64) -> bool {
        // Ranges are sorted by start: the only candidate is the last one starting at or below.
        let i = self.ranges.partition_point(|r| r.start <= hash);
        i.checked_sub(1)
            .and_then(|i| self.ranges.get(i))
            .is_some_and(|r| r.contains(hash))
    }

    /// Upstream's canonical form of the selector (each call as written, joined by ` || `).
    pub fn canonical(&self) -> &str {
        &self.canonical
    }
}

impl fmt::Display for ShardSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok<'a> {
    Ident(&'a str),
    Str(&'a str),
    Number(&'a str),
    LParen,
    RParen,
    Comma,
    Dot,
    OrOr,
    /// Any other operator or character CEL knows (`&&`, `>`, `!`, `[`...), or does not.
    Other(&'a str),
}

impl Tok<'_> {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) | Tok::Number(s) | Tok::Other(s) => format!("'{s}'"),
            Tok::Str(s) => format!("'\\'{s}\\''"),
            Tok::LParen => "'('".into(),
            Tok::RParen => "')'".into(),
            Tok::Comma => "','".into(),
            Tok::Dot => "'.'".into(),
            Tok::OrOr => "'||'".into(),
        }
    }
}

struct Token<'a> {
    tok: Tok<'a>,
    at: usize,
}

fn lex(input: &str) -> Result<Vec<Token<'_>>, ShardSelectorError> {
    let b = input.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let slice = |a: usize, z: usize| input.get(a..z).unwrap_or_default();
    while let Some(&c) = b.get(i) {
        let at = i;
        let tok = match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'(' => Tok::LParen,
            b')' => Tok::RParen,
            b',' => Tok::Comma,
            b'.' if !b.get(i + 1).is_some_and(u8::is_ascii_digit) => Tok::Dot,
            b'|' if b.get(i + 1) == Some(&b'|') => {
                i += 2;
                out.push(Token { tok: Tok::OrOr, at });
                continue;
            }
            b'\'' | b'"' => {
                let close = b
                    .iter()
                    .enumerate()
                    .skip(i + 1)
                    .find(|(_, x)| **x == c || **x == b'\\' || **x == b'\n')
                    .map(|(j, _)| j);
                match close.map(|j| (j, b.get(j))) {
                    Some((j, Some(x))) if *x == c => {
                        i = j + 1;
                        out.push(Token {
                            tok: Tok::Str(slice(at + 1, j)),
                            at,
                        });
                        continue;
                    }
                    Some((j, Some(b'\\'))) => {
                        // No hex bound needs an escape; CEL's would be decoded first, so a
                        // bound written with one is refused rather than read differently.
                        return Err(ShardSelectorError::at(
                            j,
                            "escape sequences are not supported in shard range bounds",
                        ));
                    }
                    _ => {
                        return Err(ShardSelectorError::at(
                            at,
                            "CEL parse error: Syntax error: token recognition error: unterminated string literal",
                        ));
                    }
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let z = b
                    .iter()
                    .skip(i)
                    .position(|x| !(x.is_ascii_alphanumeric() || *x == b'_'))
                    .map_or(b.len(), |n| i + n);
                i = z;
                out.push(Token {
                    tok: Tok::Ident(slice(at, z)),
                    at,
                });
                continue;
            }
            c if c.is_ascii_digit() || c == b'.' || c == b'-' => {
                let z = b
                    .iter()
                    .skip(i + 1)
                    .position(|x| !(x.is_ascii_alphanumeric() || *x == b'.'))
                    .map_or(b.len(), |n| i + 1 + n);
                i = z;
                out.push(Token {
                    tok: Tok::Number(slice(at, z)),
                    at,
                });
                continue;
            }
            _ => {
                // One character (UTF-8 aware), or a two-character operator.
                let len = input
                    .get(i..)
                    .and_then(|s| s.chars().next())
                    .map_or(1, char::len_utf8);
                let two = slice(i, i + 2);
                let len = if matches!(two, "&&" | "==" | "!=" | "<=" | ">=") {
                    2
                } else {
                    len
                };
                i += len;
                out.push(Token {
                    tok: Tok::Other(slice(at, at + len)),
                    at,
                });
                continue;
            }
        };
        i += 1;
        out.push(Token { tok, at });
    }
    Ok(out)
}

/// One `shardRange(...)` call as read.
struct Call<'a> {
    at: usize,
    key: ShardKey,
    range: ShardRange,
    start_text: &'a str,
    end_text: &'a str,
}

/// An argument of a call, as much as the checks need of it.
enum Arg<'a> {
    Path(String),
    Str(&'a str),
    Number(&'a str),
    /// A call or anything else that is not a path or a literal.
    Expr(&'static str),
}

/// Parentheses deeper than this are refused: the parser recurses on them.
const MAX_DEPTH: usize = 32;

struct Parser<'t, 'a> {
    tokens: &'t [Token<'a>],
    at: usize,
    /// The input's length: where "end of input" errors point.
    end: usize,
    depth: usize,
}

impl<'a> Parser<'_, 'a> {
    fn peek(&self) -> Option<&Token<'a>> {
        self.tokens.get(self.at)
    }

    fn pos(&self) -> usize {
        self.peek().map_or(self.end, |t| t.at)
    }

    fn next(&mut self) -> Option<&Token<'a>> {
        let t = self.tokens.get(self.at);
        self.at += 1;
        t
    }

    fn syntax(&self, what: &str) -> ShardSelectorError {
        let found = self
            .peek()
            .map_or_else(|| "<EOF>".to_owned(), |t| t.tok.describe());
        ShardSelectorError::at(
            self.pos(),
            format!("CEL parse error: Syntax error: mismatched input {found} expecting {what}"),
        )
    }

    fn expect(&mut self, want: &Tok<'_>, what: &str) -> Result<(), ShardSelectorError> {
        if self.peek().is_some_and(|t| &t.tok == want) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.syntax(what))
        }
    }

    /// `term ('||' term)*`
    fn or_expr(&mut self) -> Result<Vec<Call<'a>>, ShardSelectorError> {
        let mut calls = self.term()?;
        while self.peek().is_some_and(|t| t.tok == Tok::OrOr) {
            self.at += 1;
            calls.extend(self.term()?);
        }
        if let Some(t) = self.peek()
            && let Tok::Other(op) = t.tok
            && matches!(
                op,
                "&&" | "==" | "!=" | "<" | ">" | "<=" | ">=" | "+" | "-" | "*"
            )
        {
            // A valid CEL operator upstream parses, then refuses as the tree's root.
            return Err(ShardSelectorError::at(
                t.at,
                format!("unsupported operator \"{op}\"; only shardRange() and || are allowed"),
            ));
        }
        Ok(calls)
    }

    /// `'(' or_expr ')'` or a call.
    fn term(&mut self) -> Result<Vec<Call<'a>>, ShardSelectorError> {
        let at = self.pos();
        match self.peek().map(|t| &t.tok) {
            Some(Tok::LParen) => {
                if self.depth >= MAX_DEPTH {
                    return Err(ShardSelectorError::at(
                        at,
                        format!("parentheses nested deeper than {MAX_DEPTH}"),
                    ));
                }
                self.at += 1;
                self.depth += 1;
                let calls = self.or_expr()?;
                self.depth -= 1;
                self.expect(&Tok::RParen, "')'")?;
                Ok(calls)
            }
            Some(Tok::Ident(name)) => {
                let name = *name;
                self.at += 1;
                if self.peek().is_some_and(|t| t.tok == Tok::LParen) {
                    if name != "shardRange" {
                        return Err(ShardSelectorError::at(
                            at,
                            format!(
                                "unsupported function \"{name}\"; only shardRange() and || are allowed"
                            ),
                        ));
                    }
                    self.at += 1;
                    return self.shard_range(at).map(|c| vec![c]);
                }
                Err(ShardSelectorError::at(
                    at,
                    "unexpected expression kind; expected shardRange() call or || operator",
                ))
            }
            Some(Tok::Str(_) | Tok::Number(_)) => Err(ShardSelectorError::at(
                at,
                "unexpected expression kind; expected shardRange() call or || operator",
            )),
            _ => Err(self.syntax("a shardRange() call")),
        }
    }

    /// The arguments of `shardRange(`, its `(` read.
    fn shard_range(&mut self, at: usize) -> Result<Call<'a>, ShardSelectorError> {
        let mut args: Vec<(usize, Arg<'a>)> = Vec::new();
        if self.peek().is_some_and(|t| t.tok == Tok::RParen) {
            self.at += 1;
        } else {
            loop {
                let arg_at = self.pos();
                args.push((arg_at, self.arg()?));
                match self.next().map(|t| &t.tok) {
                    Some(Tok::Comma) => {}
                    Some(Tok::RParen) => break,
                    _ => {
                        self.at -= 1;
                        return Err(self.syntax("{',', ')'}"));
                    }
                }
            }
        }
        let [(path_at, path), (start_at, start), (end_at, end)] = <[_; 3]>::try_from(args)
            .map_err(|args| {
                ShardSelectorError::at(
                    at,
                    format!(
                        "shardRange() requires exactly 3 arguments, got {}",
                        args.len()
                    ),
                )
            })?;
        let key = match path {
            Arg::Path(p) => match p.as_str() {
                "object.metadata.uid" => ShardKey::Uid,
                "object.metadata.namespace" => ShardKey::Namespace,
                other => {
                    return Err(ShardSelectorError::at(
                        path_at,
                        format!(
                            "unsupported field path \"{other}\"; supported: object.metadata.uid, object.metadata.namespace"
                        ),
                    ));
                }
            },
            other => {
                return Err(ShardSelectorError::at(
                    path_at,
                    format!(
                        "shardRange() first argument: expected field path (e.g. object.metadata.uid), got {}",
                        other.kind()
                    ),
                ));
            }
        };
        let (start_text, start) = hex_bound(start, "hexStart", start_at)?;
        let (end_text, end) = hex_bound(end, "hexEnd", end_at)?;
        if start >= end {
            return Err(ShardSelectorError::at(
                start_at,
                format!("shard range start {start_text} must be less than end {end_text}"),
            ));
        }
        let start = u64::try_from(start).map_err(|_| {
            ShardSelectorError::at(
                start_at,
                format!("shard range start {start_text} must be less than end {end_text}"),
            )
        })?;
        Ok(Call {
            at,
            key,
            range: ShardRange { start, end },
            start_text,
            end_text,
        })
    }

    /// One argument: a dotted path, a literal, or something else (a call, a parenthesized
    /// expression) skipped to its end.
    fn arg(&mut self) -> Result<Arg<'a>, ShardSelectorError> {
        match self.next().map(|t| t.tok.clone()) {
            Some(Tok::Str(s)) => Ok(Arg::Str(s)),
            Some(Tok::Number(n)) => Ok(Arg::Number(n)),
            Some(Tok::Ident(first)) => {
                if self.peek().is_some_and(|t| t.tok == Tok::LParen) {
                    self.skip_group()?;
                    return Ok(Arg::Expr("a call"));
                }
                if matches!(first, "true" | "false") {
                    return Ok(Arg::Expr("a bool literal"));
                }
                let mut path = first.to_owned();
                while self.peek().is_some_and(|t| t.tok == Tok::Dot) {
                    self.at += 1;
                    match self.next().map(|t| &t.tok) {
                        Some(Tok::Ident(f)) => {
                            path.push('.');
                            path.push_str(f);
                        }
                        _ => {
                            self.at -= 1;
                            return Err(self.syntax("IDENTIFIER"));
                        }
                    }
                }
                if self.peek().is_some_and(|t| t.tok == Tok::LParen) {
                    self.skip_group()?;
                    return Ok(Arg::Expr("a call"));
                }
                Ok(Arg::Path(path))
            }
            Some(Tok::LParen) => {
                self.at -= 1;
                self.skip_group()?;
                Ok(Arg::Expr("a parenthesized expression"))
            }
            _ => {
                self.at = self.at.saturating_sub(1);
                Err(self.syntax("an expression"))
            }
        }
    }

    /// Skips a balanced `( ... )` group at the cursor.
    fn skip_group(&mut self) -> Result<(), ShardSelectorError> {
        let mut depth = 0usize;
        loop {
            match self.next().map(|t| &t.tok) {
                Some(Tok::LParen) => depth += 1,
                Some(Tok::RParen) => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
                Some(_) => {}
                None => return Err(self.syntax("')'")),
            }
        }
    }
}

impl Arg<'_> {
    fn kind(&self) -> String {
        match self {
            Arg::Path(_) => "a field path".into(),
            Arg::Str(_) => "a string literal".into(),
            Arg::Number(_) => "a number literal".into(),
            Arg::Expr(k) => (*k).into(),
        }
    }
}

/// A bound: `0x` and 16 lowercase hex digits, or `0x10000000000000000` (upstream's
/// `extractHexLiteral`, same messages).
fn hex_bound<'a>(
    arg: Arg<'a>,
    name: &str,
    at: usize,
) -> Result<(&'a str, u128), ShardSelectorError> {
    let err = |m: String| Err(ShardSelectorError::at(at, m));
    let s = match arg {
        Arg::Str(s) => s,
        Arg::Number(n) => {
            let go_type = if n.contains(['.', 'e', 'E']) {
                "float64"
            } else if n.ends_with(['u', 'U']) {
                "uint64"
            } else {
                "int64"
            };
            return err(format!("{name} must be a string literal, got {go_type}"));
        }
        other => {
            return err(format!(
                "{name} must be a string literal (e.g. '0xff'), got {}",
                other.kind()
            ));
        }
    };
    let Some(hex) = s.strip_prefix("0x") else {
        return err(format!("{name} must have '0x' prefix, got \"{s}\""));
    };
    if hex.is_empty() {
        return err(format!("{name}: hex value is required after '0x'"));
    }
    if hex.len() > 17 {
        return err(format!(
            "{name}: hex value too long ({} chars, max 17): \"{hex}\"",
            hex.len()
        ));
    }
    if let Some(c) = hex
        .chars()
        .find(|c| !(c.is_ascii_digit() || ('a'..='f').contains(c)))
    {
        return err(format!("{name}: invalid hex character \"{c}\" in \"{s}\""));
    }
    if hex.len() == 17 {
        if s != "0x10000000000000000" {
            return err(format!(
                "{name}: 17-digit hex value must be '0x10000000000000000' (2^64), got \"{s}\""
            ));
        }
        return Ok((s, 1u128 << 64));
    }
    if hex.len() != 16 {
        let padded = format!("0x{}{hex}", "0".repeat(16 - hex.len()));
        return err(format!(
            "{name} must be a 0x-prefixed 16-digit hex value, got \"{s}\" (did you mean \"{padded}\"?)"
        ));
    }
    match u64::from_str_radix(hex, 16) {
        Ok(v) => Ok((s, u128::from(v))),
        Err(e) => err(format!("{name}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors from Go's `hash/fnv` (what upstream's `sharding.HashField` uses), computed once with
    /// `go run` on go1.26.8:
    /// ```go
    /// h := fnv.New64a(); h.Write([]byte(s)); fmt.Printf("%q 0x%016x\n", s, h.Sum64())
    /// ```
    #[test]
    fn fnv1a_matches_gos_hash_fnv() {
        for (s, want) in [
            ("", 0xcbf29ce484222325),
            ("a", 0xaf63dc4c8601ec8c),
            ("foobar", 0x85944171f73967e8),
            ("default", 0xebada5168620c5fe),
            ("kube-system", 0xdf65c7bc1d82b35e),
            ("6f1c2b9e-3a8d-4c1e-9f2a-1b2c3d4e5f60", 0xedc4b0eeddd52acf),
            ("ünïcode", 0xb1b0d40350a25beb),
        ] {
            assert_eq!(fnv1a64(s.as_bytes()), want, "{s:?}");
        }
    }

    const HALF: &str =
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";

    #[test]
    fn parses_upstreams_accepted_forms() {
        let s = ShardSelector::parse(HALF).unwrap();
        assert_eq!(s.key(), ShardKey::Uid);
        assert_eq!(
            s.ranges(),
            [ShardRange {
                start: 0,
                end: 1 << 63
            }]
        );
        assert_eq!(s.canonical(), HALF);
        assert!(s.contains(0) && s.contains((1 << 63) - 1) && !s.contains(1 << 63));

        let full = ShardSelector::parse(
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x10000000000000000')",
        )
        .unwrap();
        assert_eq!(full.key(), ShardKey::Namespace);
        assert!(full.contains(u64::MAX) && full.contains(0));

        // Whitespace, no spaces, parentheses, double quotes (a CEL string too), three calls.
        for ok in [
            "  shardRange( object.metadata.uid ,  '0x0000000000000000' ,  '0x8000000000000000' )  ",
            "shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')",
            "(shardRange(object.metadata.uid, \"0x0000000000000000\", '0x8000000000000000'))",
        ] {
            let s = ShardSelector::parse(ok).unwrap();
            assert_eq!(s.ranges().len(), 1, "{ok}");
            assert_eq!(s.canonical(), HALF, "{ok}");
        }
        let three = ShardSelector::parse(
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000005') || shardRange(object.metadata.uid, '0x0000000000000005', '0x000000000000000a') || (shardRange(object.metadata.uid, '0x00000000000000f0', '0x00000000000000ff'))",
        )
        .unwrap();
        // Touching ranges merge: a hash is in at most one range.
        assert_eq!(
            three.ranges(),
            [
                ShardRange { start: 0, end: 0xa },
                ShardRange {
                    start: 0xf0,
                    end: 0xff
                }
            ]
        );
        assert!(three.contains(5) && !three.contains(0xa) && three.contains(0xf0));
        assert!(!three.contains(0xff) && !three.contains(u64::MAX));
        let overlapping = ShardSelector::parse(
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.uid, '0x4000000000000000', '0x10000000000000000')",
        )
        .unwrap();
        assert_eq!(
            overlapping.ranges(),
            [ShardRange {
                start: 0,
                end: 1 << 64
            }]
        );
    }

    fn err(input: &str) -> ShardSelectorError {
        ShardSelector::parse(input).unwrap_err()
    }

    #[test]
    fn refuses_what_upstream_refuses_with_its_words_and_a_position() {
        let cases: &[(&str, usize, &str)] = &[
            ("", 0, "empty shard selector is not allowed"),
            ("   ", 3, "empty shard selector is not allowed"),
            (
                "shardRange(object.metadata.uid, '0000000000000000', '0x8000000000000000')",
                32,
                "hexStart must have '0x' prefix, got \"0000000000000000\"",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '8000000000000000')",
                54,
                "hexEnd must have '0x' prefix",
            ),
            (
                "shardRange(object.metadata.uid, '0x', '0x8000000000000000')",
                32,
                "hexStart: hex value is required after '0x'",
            ),
            (
                "shardRange(object.metadata.name, '0x00', '0x80')",
                11,
                "unsupported field path \"object.metadata.name\"; supported: object.metadata.uid, object.metadata.namespace",
            ),
            (
                "invalidFunc(object.metadata.uid, '0x00', '0x80')",
                0,
                "unsupported function \"invalidFunc\"; only shardRange() and || are allowed",
            ),
            (
                "shardRange(object.metadata.uid, '0x000000000000000000', '0x80')",
                32,
                "hexStart: hex value too long (18 chars, max 17)",
            ),
            (
                "shardRange(object.metadata.uid, '0x0g', '0x80')",
                32,
                "hexStart: invalid hex character \"g\" in \"0x0g\"",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && shardRange(object.metadata.uid, '0x8', '0xf')",
                76,
                "unsupported operator \"&&\"",
            ),
            (
                "shardRange(object.metadata.uid, 0, 8)",
                32,
                "hexStart must be a string literal, got int64",
            ),
            (
                "object.metadata.uid > '0x0'",
                0,
                "expected shardRange() call or || operator",
            ),
            (
                "shardRange(object.metadata.uid, '0x0')",
                0,
                "shardRange() requires exactly 3 arguments, got 2",
            ),
            (
                "shardRange(object.metadata.uid, hex(0), '0x8')",
                32,
                "hexStart must be a string literal (e.g. '0xff'), got a call",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
                79,
                "all shard ranges must use the same field, got \"object.metadata.uid\" and \"object.metadata.namespace\"",
            ),
            (
                "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
                32,
                "hexStart must be a 0x-prefixed 16-digit hex value, got \"0x0\" (did you mean \"0x0000000000000000\"?)",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0xff')",
                54,
                "hexEnd must be a 0x-prefixed 16-digit hex value",
            ),
            (
                "shardRange(object.metadata.uid, '0x8000000000000000', '0x8000000000000000')",
                32,
                "shard range start 0x8000000000000000 must be less than end 0x8000000000000000",
            ),
            (
                "shardRange(object.metadata.uid, '0xffffffffffffffff', '0x0000000000000000')",
                32,
                "must be less than end",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x20000000000000000')",
                54,
                "17-digit hex value must be '0x10000000000000000' (2^64)",
            ),
            (
                "shardRange(object.metadata.uid, '0xABCDEF0000000000', '0x10000000000000000')",
                32,
                "invalid hex character \"A\"",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000'",
                74,
                "Syntax error: mismatched input <EOF>",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000, '0x8000000000000000')",
                72,
                "unterminated string literal",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') shardRange",
                76,
                "extraneous input 'shardRange'",
            ),
            ("||", 0, "Syntax error"),
            (
                "shardRange(object.metadata.uid, '0x\\x30', '0x8000000000000000')",
                35,
                "escape sequences",
            ),
        ];
        for (input, at, want) in cases {
            let e = err(input);
            assert!(
                e.message().contains(want),
                "{input}: {e} does not contain {want}"
            );
            assert_eq!(e.position(), *at, "{input}: {e}");
            assert!(e.to_string().starts_with("invalid shard selector: "));
        }
        let deep = format!("{}{HALF}{}", "(".repeat(40), ")".repeat(40));
        assert!(err(&deep).message().contains("nested deeper"));
        let long = format!("{HALF}{}", " ".repeat(MAX_SHARD_SELECTOR_LEN));
        assert!(err(&long).message().contains("the limit is"));
    }

    /// The length limit caps the ranges: 218 of the shortest calls fit, and the 219th is refused
    /// with a message naming both limits.
    #[test]
    fn the_length_limit_caps_a_selector_at_218_ranges() {
        assert_eq!(MAX_SHARD_RANGES, 218);
        let calls = |n: u64| {
            (0..n)
                .map(|i| {
                    format!(
                        "shardRange(object.metadata.uid,'0x{:016x}','0x{:016x}')",
                        i * 4,
                        i * 4 + 1
                    )
                })
                .collect::<Vec<_>>()
                .join("||")
        };
        let most = calls(218);
        assert_eq!(most.len(), 218 * 75 - 2);
        assert!(most.len() <= MAX_SHARD_SELECTOR_LEN);
        assert_eq!(ShardSelector::parse(&most).unwrap().ranges().len(), 218);
        let one_more = calls(219);
        assert!(one_more.len() > MAX_SHARD_SELECTOR_LEN);
        let e = err(&one_more);
        assert_eq!(
            e.to_string(),
            format!(
                "invalid shard selector: shard selector is {} bytes long; the limit is 16384 (at \
                 most 218 shardRange calls) (at position 16384)",
                219 * 75 - 2
            )
        );
    }
}
