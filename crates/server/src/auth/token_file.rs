//! `--token-auth-file`: static bearer tokens, in kube-apiserver's CSV format, one per line:
//! `token,user,uid[,"group1,group2,..."]` (further columns are ignored, as upstream).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::user::User;

/// Why a token file cannot be loaded: the file and line, and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct TokenFileError {
    /// The file.
    pub file: String,
    /// The 1-based line (0: the file as a whole).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Static tokens and the users they stand for.
#[derive(Debug, Default, Clone)]
pub struct TokenFile {
    tokens: HashMap<String, Arc<User>>,
}

impl TokenFile {
    /// Reads and parses a token file.
    ///
    /// # Errors
    /// A [`TokenFileError`] naming the line at fault (or the file, when it cannot be read).
    pub fn load(path: &Path) -> Result<TokenFile, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| TokenFileError {
            file: path.display().to_string(),
            line: 0,
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses a token file's text; `file` names it in errors. Blank lines are skipped. A token
    /// given twice is an error (upstream keeps the last silently; an operator wants to know).
    ///
    /// # Errors
    /// A [`TokenFileError`] naming the line at fault.
    pub fn parse(file: &str, text: &str) -> Result<TokenFile, TokenFileError> {
        let mut tokens = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let err = |message: String| TokenFileError {
                file: file.to_owned(),
                line: i + 1,
                message,
            };
            if raw.trim().is_empty() {
                continue;
            }
            let fields = csv_fields(raw).map_err(err)?;
            if fields.len() < 3 {
                return Err(err(format!(
                    "expected at least 3 columns (token,user,uid), got {}",
                    fields.len()
                )));
            }
            let (token, name, uid) = (&fields[0], &fields[1], &fields[2]);
            if token.is_empty() {
                return Err(err("the token is empty".into()));
            }
            if name.is_empty() {
                return Err(err("the user name is empty".into()));
            }
            let groups: Vec<String> = fields
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            let user = Arc::new(User::authenticated(name.as_str(), uid.as_str(), groups));
            if tokens.insert(token.clone(), user).is_some() {
                return Err(err("this token is already given on an earlier line".into()));
            }
        }
        Ok(TokenFile { tokens })
    }

    /// The user a token stands for.
    pub fn user(&self, token: &str) -> Option<&Arc<User>> {
        self.tokens.get(token)
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// The fields of one CSV line (RFC 4180 quoting: `"a,b"`, `""` for a quote inside quotes).
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut field = String::new();
    let mut chars = line.trim_end_matches('\r').chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (false, '"') if at_start => {
                quoted = true;
                at_start = false;
            }
            (false, '"') => return Err("a quote in the middle of an unquoted field".into()),
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => {
                quoted = false;
                if chars.peek().is_some_and(|c| *c != ',') {
                    return Err("text after the closing quote of a field".into());
                }
            }
            (false, ',') => {
                out.push(std::mem::take(&mut field));
                at_start = true;
            }
            (_, c) => {
                field.push(c);
                at_start = false;
            }
        }
    }
    if quoted {
        return Err("a quoted field is not closed".into());
    }
    out.push(field);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_upstream_format_with_quoted_groups() {
        let f = TokenFile::parse(
            "t.csv",
            "abc,alice,1,\"dev,ops\"\n\nxyz,bob,2\n\"q\"\"q\",\"car,ol\",3,\"a \"\"b\"\"\",extra\n",
        )
        .unwrap();
        assert_eq!(f.len(), 3);
        let a = f.user("abc").unwrap();
        assert_eq!(a.name, "alice");
        assert_eq!(a.uid, "1");
        assert_eq!(a.groups, ["dev", "ops", "system:authenticated"]);
        assert_eq!(f.user("xyz").unwrap().groups, ["system:authenticated"]);
        let c = f.user("q\"q").unwrap();
        assert_eq!(c.name, "car,ol");
        assert_eq!(c.groups, ["a \"b\"", "system:authenticated"]);
    }

    #[test]
    fn bad_lines_name_their_line() {
        let cases = [
            ("ok,u,1\nonly,two\n", 2, "at least 3 columns"),
            ("ok,u,1\n\n,u,2\n", 3, "token is empty"),
            ("t,,1\n", 1, "user name is empty"),
            ("t,\"u,1\n", 1, "not closed"),
            ("t,\"u\"x,1\n", 1, "after the closing quote"),
            ("t,u\"v,1\n", 1, "middle of an unquoted field"),
            ("t,u,1\nt,v,2\n", 2, "already given"),
        ];
        for (text, line, want) in cases {
            let e = TokenFile::parse("f.csv", text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(want), "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("f.csv:{line}: ")), "{e}");
        }
        assert!(TokenFile::load(Path::new("/nonexistent/tokens.csv")).is_err());
    }

    #[test]
    fn quoted_commas_and_quotes() {
        assert_eq!(
            csv_fields("a,\"b,c\",\"d\"\"e\"").unwrap(),
            ["a", "b,c", "d\"e"]
        );
        assert_eq!(csv_fields("a,,").unwrap(), ["a", "", ""]);
    }
}
