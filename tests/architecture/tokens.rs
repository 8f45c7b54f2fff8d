//! Rust source as the tokens that paths are made of: identifiers, `::`, braces and other
//! punctuation, each with its line, lexed by proc-macro2 (the lexer syn and every derive
//! use). Comments are dropped (a comment that names a module is no dependency on it);
//! string and character literals are one token that no path matches, so that a `{` in a
//! format string does not open a block.

use std::str::FromStr;

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Ident,
    /// `::`, or one character of punctuation.
    Punct,
    /// A string literal, without its quotes (enough for `#[path = "…"]`).
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

/// The tokens of `source`, a whole Rust file (one that compiles: the crate's own).
pub fn tokenize(source: &str) -> Vec<Token> {
    let stream = TokenStream::from_str(source).unwrap_or_else(|e| panic!("not Rust source: {e:?}"));
    let mut tokens = Vec::new();
    flatten(stream, &mut tokens);
    tokens
}

fn flatten(stream: TokenStream, tokens: &mut Vec<Token>) {
    let mut joint_colon = false;
    for tree in stream {
        let line = tree.span().start().line;
        match tree {
            TokenTree::Ident(ident) => {
                let text = ident.to_string();
                let text = text.strip_prefix("r#").map_or(text.clone(), str::to_owned);
                tokens.push(Token { kind: Kind::Ident, text, line });
            }
            TokenTree::Punct(punct) => {
                let c = punct.as_char();
                if c == ':' && joint_colon {
                    // The second half of `::`.
                    if let Some(last) = tokens.last_mut() {
                        last.text = "::".into();
                    }
                    joint_colon = false;
                    continue;
                }
                joint_colon = c == ':' && punct.spacing() == Spacing::Joint;
                // A lifetime's quote: `'a` is the name `a` to a path scan.
                if c == '\'' {
                    continue;
                }
                tokens.push(Token { kind: Kind::Punct, text: c.to_string(), line });
                continue;
            }
            TokenTree::Literal(literal) => tokens.push(literal_token(&literal.to_string(), line)),
            TokenTree::Group(group) => {
                let (open, close) = match group.delimiter() {
                    Delimiter::Brace => ("{", "}"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::None => ("", ""),
                };
                if !open.is_empty() {
                    tokens.push(Token { kind: Kind::Punct, text: open.into(), line });
                }
                flatten(group.stream(), tokens);
                if !close.is_empty() {
                    tokens.push(Token { kind: Kind::Punct, text: close.into(), line: group.span_close().end().line });
                }
            }
        }
        joint_colon = false;
    }
}

/// A string literal (plain, raw, byte or C) as `Str` without its quotes; anything else
/// (characters, bytes, numbers) as `Literal`.
fn literal_token(text: &str, line: usize) -> Token {
    let body = text.trim_start_matches(['b', 'c']).trim_start_matches('r');
    let hashes = body.len() - body.trim_start_matches('#').len();
    let quoted = &body[hashes..];
    if quoted.starts_with('"') && body.len() >= 2 * hashes + 2 {
        let inner = &quoted[1..quoted.len() - hashes - 1];
        Token { kind: Kind::Str, text: inner.to_owned(), line }
    } else {
        Token { kind: Kind::Literal, text: text.to_owned(), line }
    }
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
