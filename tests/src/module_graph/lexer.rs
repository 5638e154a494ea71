//! Rust source → the few tokens the module graph needs: identifiers, `::`,
//! string literals (for `#[path = "…"]`) and single punctuation characters.
//! Comments, char literals and lifetimes are dropped, so a path written in a
//! comment or a string is never read as an import.

/// One token of Rust source, as far as the module graph cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// An identifier or keyword (`r#` stripped).
    Ident(String),
    /// `::`
    PathSep,
    /// The contents of a string literal (escapes left as written).
    Str(String),
    /// Any other single character (`{`, `}`, `;`, `*`, `#`, `<`, `!`, …).
    Punct(char),
}

/// Splits `src` into tokens, skipping whitespace, comments, numbers,
/// char literals and lifetimes.
pub fn tokens(src: &str) -> Vec<Token> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i = skip_block_comment(&chars, i);
        } else if let Some((end, text)) = string_literal(&chars, i) {
            out.push(Token::Str(text));
            i = end;
        } else if c == '\'' {
            i = skip_char_or_lifetime(&chars, i);
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c == '_' || c.is_alphabetic() {
            let start = if c == 'r'
                && next == Some('#')
                && chars.get(i + 2).is_some_and(|c| is_ident(*c))
            {
                i + 2
            } else {
                i
            };
            let mut end = start;
            while end < chars.len() && is_ident(chars[end]) {
                end += 1;
            }
            out.push(Token::Ident(chars[start..end].iter().collect()));
            i = end;
        } else if c == ':' && next == Some(':') {
            out.push(Token::PathSep);
            i += 2;
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Block comments nest in Rust.
fn skip_block_comment(chars: &[char], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    i
}

/// `"…"`, `b"…"`, `c"…"`, `r"…"`, `r#"…"#`, `br#"…"#`: the end index and
/// the contents, or `None` when no string literal starts at `i`.
fn string_literal(chars: &[char], i: usize) -> Option<(usize, String)> {
    let mut j = i;
    if matches!(chars.get(j), Some('b' | 'c')) {
        j += 1;
    }
    let raw = chars.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let mut hashes = 0;
    while raw && chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    // A prefix letter must start the token: `x"` is an identifier then a string.
    if j > i && i > 0 && is_ident(chars[i - 1]) {
        return None;
    }
    let start = j + 1;
    let mut k = start;
    while k < chars.len() {
        if !raw && chars[k] == '\\' {
            k += 2;
            continue;
        }
        if chars[k] == '"' && (0..hashes).all(|h| chars.get(k + 1 + h) == Some(&'#')) {
            let text = chars[start..k].iter().collect();
            return Some((k + 1 + hashes, text));
        }
        k += 1;
    }
    Some((chars.len(), chars[start..].iter().collect()))
}

/// `'a'`, `'\n'`, `'\u{1F600}'` are char literals; `'a` is a lifetime.
fn skip_char_or_lifetime(chars: &[char], i: usize) -> usize {
    match (chars.get(i + 1), chars.get(i + 2)) {
        (Some('\\'), _) => {
            // Past the backslash and the escaped character (`'\''`).
            let mut k = i + 3;
            while k < chars.len() && chars[k] != '\'' {
                k += 1;
            }
            k + 1
        }
        (Some(_), Some('\'')) => i + 3,
        _ => {
            let mut k = i + 1;
            while k < chars.len() && is_ident(chars[k]) {
                k += 1;
            }
            k
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(src: &str) -> Vec<String> {
        tokens(src)
            .into_iter()
            .filter_map(|t| match t {
                Token::Ident(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn comments_strings_chars_and_lifetimes_hide_nothing_real() {
        let src = r##"
            // use crate::hidden_a;
            /* use crate::hidden_b; /* nested */ use crate::hidden_c; */
            let s = "use crate::hidden_d;";
            let r = r#"crate::hidden_e "quoted""#;
            let c = '"'; let q = '\''; fn f<'a>(x: &'a str) {}
            use crate::real;
        "##;
        let ids = idents(src);
        for hidden in ["hidden_a", "hidden_b", "hidden_c", "hidden_d", "hidden_e"] {
            assert!(
                !ids.contains(&hidden.to_string()),
                "{hidden} leaked: {ids:?}"
            );
        }
        assert!(ids.ends_with(&["use".into(), "crate".into(), "real".into()]));
    }

    #[test]
    fn path_attribute_strings_are_kept() {
        let toks = tokens(r#"#[path = "x_tests.rs"] mod tests;"#);
        assert!(toks.contains(&Token::Str("x_tests.rs".into())));
    }

    #[test]
    fn raw_identifiers_lose_their_prefix() {
        assert_eq!(idents("r#type::x"), ["type", "x"]);
    }
}
