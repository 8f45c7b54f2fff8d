//! Rust source as the tokens that paths are made of: identifiers, `::`, braces and other
//! punctuation, each with its line. Comments are dropped (a comment that names a module is
//! no dependency on it); string and character literals become one token that no path
//! matches, so that a `{` in a format string does not open a block.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Ident,
    /// `::`, or one character of punctuation.
    Punct,
    /// A string literal, its contents unescaped only as far as `#[path = "…"]` needs.
    Str,
    /// A character or byte literal, a number.
    Literal,
}

#[derive(Debug, Clone)]
pub struct Token {
    pub kind: Kind,
    pub text: String,
    pub line: usize,
}

impl Token {
    pub fn is(&self, text: &str) -> bool {
        self.kind != Kind::Str && self.text == text
    }

    pub fn is_ident(&self) -> bool {
        self.kind == Kind::Ident
    }
}

pub fn tokenize(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i = skip_block_comment(&chars, i, &mut line);
        } else if c == '"' {
            let start_line = line;
            let (end, text) = string(&chars, i + 1, 0, &mut line);
            tokens.push(Token { kind: Kind::Str, text, line: start_line });
            i = end;
        } else if c == '\'' {
            i = quote(&chars, i, line, &mut tokens);
        } else if c.is_alphabetic() || c == '_' {
            i = word(&chars, i, &mut line, &mut tokens);
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token { kind: Kind::Literal, text: chars[start..i].iter().collect(), line });
        } else if c == ':' && next == Some(':') {
            tokens.push(Token { kind: Kind::Punct, text: "::".into(), line });
            i += 2;
        } else {
            tokens.push(Token { kind: Kind::Punct, text: c.to_string(), line });
            i += 1;
        }
    }
    tokens
}

/// Block comments nest in Rust.
fn skip_block_comment(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    let mut depth = 0;
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
            if chars[i] == '\n' {
                *line += 1;
            }
            i += 1;
        }
    }
    i
}

/// The string whose contents start at `i`. `raw_hashes` is 0 for a string with escapes, and
/// one more than its `#`s for a raw one (closed by a quote and that many `#`s). Returns the
/// index after it and its text.
fn string(chars: &[char], mut i: usize, raw_hashes: usize, line: &mut usize) -> (usize, String) {
    let raw = raw_hashes > 0;
    let mut text = String::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            *line += 1;
        }
        if c == '\\' && !raw {
            if let Some(&escaped) = chars.get(i + 1) {
                if escaped == '\n' {
                    *line += 1;
                }
                text.push(escaped);
            }
            i += 2;
            continue;
        }
        if c == '"' {
            let closing = (1..raw_hashes).all(|k| chars.get(i + k) == Some(&'#'));
            if closing {
                return (i + raw_hashes.max(1), text);
            }
        }
        text.push(c);
        i += 1;
    }
    (i, text)
}

/// A character literal (`'{'`, `'\''`) or a lifetime (`'a`, which is left for the word
/// that follows).
fn quote(chars: &[char], i: usize, line: usize, tokens: &mut Vec<Token>) -> usize {
    let literal_end = if chars.get(i + 1) == Some(&'\\') {
        // An escape: the literal ends at the first quote after the escaped character.
        (i + 3..chars.len()).find(|&k| chars[k] == '\'')
    } else if chars.get(i + 2) == Some(&'\'') {
        Some(i + 2)
    } else {
        None
    };
    match literal_end {
        Some(end) => {
            tokens.push(Token { kind: Kind::Literal, text: chars[i..=end].iter().collect(), line });
            end + 1
        }
        None => i + 1,
    }
}

/// An identifier, or the prefix of a literal: `b"…"`, `r#"…"#`, `br"…"`, `b'…'`, or a raw
/// identifier `r#type`.
fn word(chars: &[char], mut i: usize, line: &mut usize, tokens: &mut Vec<Token>) -> usize {
    let start = i;
    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
        i += 1;
    }
    let word: String = chars[start..i].iter().collect();
    let next = chars.get(i).copied();
    let start_line = *line;
    match (word.as_str(), next) {
        ("r" | "br" | "cr", Some('#' | '"')) => {
            let hashes = chars[i..].iter().take_while(|c| **c == '#').count();
            if chars.get(i + hashes) == Some(&'"') {
                let (end, text) = string(chars, i + hashes + 1, hashes + 1, line);
                tokens.push(Token { kind: Kind::Str, text, line: start_line });
                end
            } else {
                // A raw identifier: `r#type` is the identifier `type`.
                word_after_raw(chars, i + hashes, *line, tokens)
            }
        }
        ("b" | "c", Some('"')) => {
            let (end, text) = string(chars, i + 1, 0, line);
            tokens.push(Token { kind: Kind::Str, text, line: start_line });
            end
        }
        ("b", Some('\'')) => quote(chars, i, *line, tokens),
        _ => {
            tokens.push(Token { kind: Kind::Ident, text: word, line: *line });
            i
        }
    }
}

fn word_after_raw(chars: &[char], mut i: usize, line: usize, tokens: &mut Vec<Token>) -> usize {
    let start = i;
    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
        i += 1;
    }
    tokens.push(Token { kind: Kind::Ident, text: chars[start..i].iter().collect(), line });
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(source: &str) -> Vec<String> {
        tokenize(source).into_iter().filter(|t| t.kind != Kind::Str).map(|t| t.text).collect()
    }

    #[test]
    fn comments_strings_and_char_literals_hide_their_contents() {
        let source = "a // crate::x\n/* /* crate::y */ */ b \"crate::{z\" '{' r#\"}\"# c::d 'a";
        assert_eq!(texts(source), ["a", "b", "'{'", "c", "::", "d", "a"]);
    }

    #[test]
    fn lines_count_newlines_inside_strings_and_comments() {
        let tokens = tokenize("\"a\nb\" /* \n */ x");
        assert_eq!(tokens.last().map(|t| (t.text.as_str(), t.line)), Some(("x", 3)));
    }
}
