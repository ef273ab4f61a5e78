//! `Warning` response headers, as kube-apiserver's warning recorder writes them: code 299, no
//! agent, each text once (deduplicated), and at most 4 KiB of text in all. Past that, every
//! warning is cut to 256 characters and the headers written so far are rewritten cut the same
//! way; warnings that arrive once the cut ones reach 4 KiB are dropped. A write with 100 000
//! unknown fields answered 7 162 headers (300 KB) before; clients refuse far fewer (Python's
//! HTTP client: 100), so the values go several to a header line ([`headers`]).

use std::collections::HashSet;

/// Characters of warning text written in all before truncation starts (upstream:
/// `truncateAtTotalRunes`).
const TOTAL_CHARS: usize = 4 * 1024;
/// Characters each warning is cut to once truncating (upstream: `truncateItemRunes`).
const ITEM_CHARS: usize = 256;

/// Bytes of one `Warning` header line before the next warning starts a new line.
const LINE_BYTES: usize = 1024;

/// The `Warning` header lines for these warnings: upstream's values (deduplicated, capped),
/// several to a line, comma-separated. RFC 9110 makes a list of values in one field line the
/// same as one per line, and client-go's `ParseWarningHeaders` reads both; but 4 KiB of short
/// warnings one per line is some 150 lines, and Python's `http.client` refuses a response with
/// more than 100.
pub(crate) fn headers(warnings: &[String]) -> Vec<String> {
    fold(
        headers_within(warnings, TOTAL_CHARS, ITEM_CHARS),
        LINE_BYTES,
    )
}

/// Header values joined with `, ` into lines of at most `max` bytes (a longer value alone).
fn fold(values: Vec<String>, max: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for v in values {
        match lines.last_mut() {
            Some(line) if line.len() + 2 + v.len() <= max => {
                line.push_str(", ");
                line.push_str(&v);
            }
            _ => lines.push(v),
        }
    }
    lines
}

/// Upstream's recorder (`AddWarning`) over a sequence of warnings, with its two limits.
fn headers_within(warnings: &[String], total: usize, item: usize) -> Vec<String> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut ordered: Vec<&str> = Vec::new();
    let mut out: Vec<String> = Vec::new();
    let (mut written, mut truncating) = (0usize, false);
    for text in warnings {
        if text.is_empty() {
            continue;
        }
        if truncating && written >= total {
            break;
        }
        if !seen.insert(text) {
            continue;
        }
        ordered.push(text);
        let (cut, chars) = if truncating {
            cut_to(text, item)
        } else {
            (text.as_str(), text.chars().count())
        };
        if truncating || written + chars <= total {
            written += chars;
            out.push(header(cut));
            continue;
        }
        // Over the total for the first time: everything so far is rewritten, cut.
        truncating = true;
        written = 0;
        out.clear();
        for text in &ordered {
            let (cut, chars) = cut_to(text, item);
            written += chars;
            out.push(header(cut));
        }
    }
    out
}

/// `text` cut to its first `max` characters, and its length in characters.
fn cut_to(text: &str, max: usize) -> (&str, usize) {
    match text.char_indices().nth(max) {
        Some((at, _)) => (&text[..at], max),
        None => (text, text.chars().count()),
    }
}

/// A `Warning` header's value as kube-apiserver writes it (RFC 7234: code 299, no agent, the text
/// quoted with `"` and `\` escaped).
pub(crate) fn header(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str("299 - \"");
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        // Header values are visible ASCII: anything else is replaced rather than refused.
        out.push(if c.is_ascii() && !c.is_ascii_control() {
            c
        } else {
            '?'
        });
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_quoted_and_escaped_as_upstream_writes_them() {
        assert_eq!(
            header(r#"unknown field "spec.foo""#),
            r#"299 - "unknown field \"spec.foo\"""#
        );
        assert_eq!(header("a\\b\u{7}é"), r#"299 - "a\\b??""#);
    }

    /// Upstream's `TestTruncation` (limits of 25 and 5), step for step.
    #[test]
    fn truncation_and_deduplication_follow_upstreams_recorder() {
        let w = |xs: &[&str]| -> Vec<String> { xs.iter().map(|x| (*x).to_owned()).collect() };
        let first = w(&["aaaaaaaaaa", "aaaaaaaaaa", "bb", "ccc", "Iñtërnâtiô"]);
        assert_eq!(
            headers_within(&first, 25, 5),
            [
                r#"299 - "aaaaaaaaaa""#,
                r#"299 - "bb""#,
                r#"299 - "ccc""#,
                r#"299 - "I?t?rn?ti?""#
            ]
        );
        let mut all = first;
        all.extend(w(&["e", "ffffffffff", "ffffffffff", "gggggggggg", "h"]));
        assert_eq!(
            headers_within(&all, 25, 5),
            [
                r#"299 - "aaaaa""#,
                r#"299 - "bb""#,
                r#"299 - "ccc""#,
                r#"299 - "I?t?r""#,
                r#"299 - "e""#,
                r#"299 - "fffff""#,
                r#"299 - "ggggg""#
            ]
        );
    }

    /// Issue 20, item 10: 100 000 unknown fields made 7 162 headers (300 KB).
    #[test]
    fn many_warnings_make_a_few_kilobytes_of_headers() {
        let warnings: Vec<String> = (0..100_000)
            .map(|i| format!("unknown field \"spec.f{i}\""))
            .collect();
        let values = headers_within(&warnings, TOTAL_CHARS, ITEM_CHARS);
        // Each value: `299 - "`, the text with its two quotes escaped, `"`.
        let text: usize = values.iter().map(|h| h.len() - 10).sum();
        assert!(text <= TOTAL_CHARS + ITEM_CHARS, "{text}");
        let lines = headers(&warnings);
        assert!(lines.len() <= 8, "{}", lines.len());
        assert_eq!(lines.join(", "), values.join(", "));
        assert!(lines.iter().all(|l| l.len() <= LINE_BYTES));
        // A long warning is cut to 256 characters once truncating.
        let long: Vec<String> = (0..40)
            .map(|i| format!("{i}{}", "x".repeat(1000)))
            .collect();
        let values = headers_within(&long, TOTAL_CHARS, ITEM_CHARS);
        assert!(
            values.iter().all(|h| h.len() <= ITEM_CHARS + 8),
            "{values:?}"
        );
        assert_eq!(
            fold(values.clone(), 100),
            values,
            "a value longer than a line is alone"
        );
    }
}
