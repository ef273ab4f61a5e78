//! Label selectors in the Kubernetes syntax: `=`, `==`, `!=`, `in`, `notin`, `key`, `!key`, `>` and `<`.
//!
//! The grammar, tokens and validation follow `k8s.io/apimachinery/pkg/labels/selector.go`. Errors name
//! the byte position and what was expected there.
// Reads outside input (requests or stored values): it must not panic on any of it
// (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice,
        clippy::panic
    )
)]

use std::fmt;

use crate::model::labels::{validate_key, validate_value};
use crate::model::selector::SelectorError;

/// The operator of one label requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabelOp {
    /// `key in (a,b)`: the label exists and its value is one of the set.
    In,
    /// `key notin (a,b)`: the label is absent or its value is not in the set.
    NotIn,
    /// `key=a`.
    Equals,
    /// `key==a` (same meaning as `=`, kept for the round trip).
    DoubleEquals,
    /// `key!=a`: the label is absent or differs.
    NotEquals,
    /// `key`: the label exists.
    Exists,
    /// `!key`: the label does not exist.
    DoesNotExist,
    /// `key>5`: the label exists, is an integer, and is greater.
    GreaterThan,
    /// `key<5`: the label exists, is an integer, and is smaller.
    LessThan,
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelRequirement {
    key: String,
    op: LabelOp,
    /// Sorted and deduplicated, as upstream's string set.
    values: Vec<String>,
    /// Parsed once for `>` and `<`.
    bound: i64,
}

impl LabelRequirement {
    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn op(&self) -> LabelOp {
        self.op
    }

    /// The values, sorted.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether a label value (`None` when absent) satisfies this requirement.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match self.op {
            LabelOp::In | LabelOp::Equals | LabelOp::DoubleEquals => {
                value.is_some_and(|v| self.has(v))
            }
            LabelOp::NotIn | LabelOp::NotEquals => value.is_none_or(|v| !self.has(v)),
            LabelOp::Exists => value.is_some(),
            LabelOp::DoesNotExist => value.is_none(),
            LabelOp::GreaterThan => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > self.bound),
            LabelOp::LessThan => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < self.bound),
        }
    }

    /// The values an object's label must have for this requirement to hold, when the requirement pins
    /// the label to a finite set (`=`, `==`, `in`). Used for index lookups and watch routing.
    pub fn pinned_values(&self) -> Option<&[String]> {
        matches!(
            self.op,
            LabelOp::In | LabelOp::Equals | LabelOp::DoubleEquals
        )
        .then_some(&self.values[..])
    }

    fn has(&self, v: &str) -> bool {
        self.values.iter().any(|x| x == v)
    }
}

impl fmt::Display for LabelRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = || self.values.first().map(String::as_str).unwrap_or("");
        match self.op {
            LabelOp::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            LabelOp::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
            LabelOp::Equals => write!(f, "{}={}", self.key, v()),
            LabelOp::DoubleEquals => write!(f, "{}=={}", self.key, v()),
            LabelOp::NotEquals => write!(f, "{}!={}", self.key, v()),
            LabelOp::Exists => write!(f, "{}", self.key),
            LabelOp::DoesNotExist => write!(f, "!{}", self.key),
            LabelOp::GreaterThan => write!(f, "{}>{}", self.key, v()),
            LabelOp::LessThan => write!(f, "{}<{}", self.key, v()),
        }
    }
}

/// A parsed label selector: the AND of its requirements. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// Parses the Kubernetes label selector syntax.
    ///
    /// # Errors
    /// [`SelectorError`] naming the byte position and what was expected.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let tokens = lex(text).map_err(|(pos, msg)| SelectorError::label(text, pos, msg))?;
        let mut p = Parser { tokens, pos: 0 };
        let mut requirements = p
            .parse()
            .map_err(|(pos, msg)| SelectorError::label(text, pos, msg))?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[LabelRequirement] {
        &self.requirements
    }

    /// Whether the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object with these labels matches. `get` looks a label up by key.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| r.matches(get(&r.key)))
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, SelectorError> {
        Self::parse(s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    In,
    NotIn,
    Bang,
    NotEquals,
    Equals,
    DoubleEquals,
    Gt,
    Lt,
    Comma,
    Open,
    Close,
    End,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("'{s}'"),
            Tok::In => "'in'".into(),
            Tok::NotIn => "'notin'".into(),
            Tok::Bang => "'!'".into(),
            Tok::NotEquals => "'!='".into(),
            Tok::Equals => "'='".into(),
            Tok::DoubleEquals => "'=='".into(),
            Tok::Gt => "'>'".into(),
            Tok::Lt => "'<'".into(),
            Tok::Comma => "','".into(),
            Tok::Open => "'('".into(),
            Tok::Close => "')'".into(),
            Tok::End => "end of string".into(),
        }
    }
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

type ParseErr = (usize, String);

fn lex(s: &str) -> Result<Vec<(usize, Tok)>, ParseErr> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while b.get(i).copied().is_some_and(is_space) {
            i += 1;
        }
        let Some(&c) = b.get(i) else {
            out.push((i, Tok::End));
            return Ok(out);
        };
        let start = i;
        if is_special(c) {
            // Longest match among the operator tokens, as upstream's scanSpecialSymbol.
            let two = b.get(i..i + 2);
            let (tok, len) = match (c, two) {
                (_, Some(b"!=")) => (Tok::NotEquals, 2),
                (_, Some(b"==")) => (Tok::DoubleEquals, 2),
                (b'!', _) => (Tok::Bang, 1),
                (b'=', _) => (Tok::Equals, 1),
                (b'>', _) => (Tok::Gt, 1),
                (b'<', _) => (Tok::Lt, 1),
                (b',', _) => (Tok::Comma, 1),
                (b'(', _) => (Tok::Open, 1),
                (b')', _) => (Tok::Close, 1),
                _ => return Err((i, format!("unexpected character '{}'", c as char))),
            };
            i += len;
            out.push((start, tok));
        } else {
            while b.get(i).is_some_and(|&c| !is_special(c) && !is_space(c)) {
                i += 1;
            }
            // Words end at an ASCII byte or the end, so this is a character boundary.
            let word = s.get(start..i).unwrap_or_default();
            let tok = match word {
                "in" => Tok::In,
                "notin" => Tok::NotIn,
                _ => Tok::Ident(word.to_owned()),
            };
            out.push((start, tok));
        }
    }
}

struct Parser {
    tokens: Vec<(usize, Tok)>,
    pos: usize,
}

impl Parser {
    /// Looks at the next token. In value position `in` and `notin` are ordinary identifiers.
    fn peek(&self, value_ctx: bool) -> (usize, Tok) {
        // The lexer always ends with `End`, and `next` never moves past it.
        let (p, t) = self.tokens.get(self.pos).cloned().unwrap_or((0, Tok::End));
        (p, if value_ctx { as_ident(t) } else { t })
    }

    fn next(&mut self, value_ctx: bool) -> (usize, Tok) {
        let t = self.peek(value_ctx);
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn parse(&mut self) -> Result<Vec<LabelRequirement>, ParseErr> {
        let mut reqs = Vec::new();
        loop {
            let (pos, tok) = self.peek(true);
            match tok {
                Tok::Ident(_) | Tok::Bang => {
                    reqs.push(self.requirement()?);
                    let (pos, tok) = self.next(true);
                    match tok {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (pos, tok) = self.peek(true);
                            if !matches!(tok, Tok::Ident(_) | Tok::Bang) {
                                return Err((
                                    pos,
                                    format!(
                                        "found {}, expected: identifier after ','",
                                        tok.describe()
                                    ),
                                ));
                            }
                        }
                        other => {
                            return Err((
                                pos,
                                format!(
                                    "found {}, expected: ',' or end of string",
                                    other.describe()
                                ),
                            ));
                        }
                    }
                }
                Tok::End => return Ok(reqs),
                other => {
                    return Err((
                        pos,
                        format!(
                            "found {}, expected: !, identifier, or end of string",
                            other.describe()
                        ),
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<LabelRequirement, ParseErr> {
        let (mut pos, mut tok) = self.next(true);
        let negated = tok == Tok::Bang;
        if negated {
            (pos, tok) = self.next(true);
        }
        let Tok::Ident(key) = tok else {
            return Err((
                pos,
                format!("found {}, expected: identifier", tok.describe()),
            ));
        };
        validate_key(&key).map_err(|m| (pos, m))?;
        let (_, after) = self.peek(true);
        if negated || matches!(after, Tok::End | Tok::Comma) {
            if negated && !matches!(after, Tok::End | Tok::Comma) {
                let (p, t) = self.peek(true);
                return Err((
                    p,
                    format!(
                        "found {}, expected: ',' or end of string after '!{key}'",
                        t.describe()
                    ),
                ));
            }
            let op = if negated {
                LabelOp::DoesNotExist
            } else {
                LabelOp::Exists
            };
            return Ok(LabelRequirement {
                key,
                op,
                values: Vec::new(),
                bound: 0,
            });
        }
        let (op_pos, op_tok) = self.next(false);
        let op = match op_tok {
            Tok::In => LabelOp::In,
            Tok::NotIn => LabelOp::NotIn,
            Tok::Equals => LabelOp::Equals,
            Tok::DoubleEquals => LabelOp::DoubleEquals,
            Tok::NotEquals => LabelOp::NotEquals,
            Tok::Gt => LabelOp::GreaterThan,
            Tok::Lt => LabelOp::LessThan,
            other => {
                return Err((
                    op_pos,
                    format!(
                        "found {}, expected: in, notin, =, ==, !=, gt, lt",
                        other.describe()
                    ),
                ));
            }
        };
        let (values_pos, mut values) = match op {
            LabelOp::In | LabelOp::NotIn => self.value_set()?,
            _ => self.exact_value()?,
        };
        values.sort();
        values.dedup();
        for v in &values {
            validate_value(v).map_err(|m| {
                (
                    values_pos,
                    format!("invalid value for label \"{key}\": {m}"),
                )
            })?;
        }
        let mut bound = 0;
        if matches!(op, LabelOp::GreaterThan | LabelOp::LessThan) {
            let value = values.first().map_or("", String::as_str);
            bound = value.parse::<i64>().map_err(|_| {
                (
                    values_pos,
                    format!(
                        "for 'gt', 'lt' operators, the value must be an integer, found \"{value}\""
                    ),
                )
            })?;
        }
        Ok(LabelRequirement {
            key,
            op,
            values,
            bound,
        })
    }

    fn value_set(&mut self) -> Result<(usize, Vec<String>), ParseErr> {
        let (pos, tok) = self.next(true);
        if tok != Tok::Open {
            return Err((pos, format!("found {}, expected: '('", tok.describe())));
        }
        let mut values = Vec::new();
        // Upstream accepts empty members: "()", "(,a)" and "(a,,b)" all contain "".
        let mut expect_value = true;
        loop {
            let (pos, tok) = self.next(true);
            match tok {
                Tok::Ident(v) if expect_value => {
                    values.push(v);
                    expect_value = false;
                }
                Tok::Comma => {
                    if expect_value {
                        values.push(String::new());
                    }
                    expect_value = true;
                }
                Tok::Close => {
                    if expect_value {
                        values.push(String::new());
                    }
                    return Ok((pos, values));
                }
                other => {
                    let what = if expect_value {
                        "',', ')' or identifier"
                    } else {
                        "',' or ')'"
                    };
                    return Err((pos, format!("found {}, expected: {what}", other.describe())));
                }
            }
        }
    }

    fn exact_value(&mut self) -> Result<(usize, Vec<String>), ParseErr> {
        let (pos, tok) = self.peek(true);
        match tok {
            Tok::End | Tok::Comma => Ok((pos, vec![String::new()])),
            Tok::Ident(v) => {
                self.next(true);
                Ok((pos, vec![v]))
            }
            other => Err((
                pos,
                format!("found {}, expected: identifier", other.describe()),
            )),
        }
    }
}

fn as_ident(t: Tok) -> Tok {
    match t {
        Tok::In => Tok::Ident("in".into()),
        Tok::NotIn => Tok::Ident("notin".into()),
        t => t,
    }
}
