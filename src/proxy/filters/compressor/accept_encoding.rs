//! Which encoding a response gets: the client's `accept-encoding` (tokens with q-values,
//! `identity`, `*`) against the compressors of the filter chain, decided as Envoy's
//! compressor filter decides it, and the reason each filter counts.

/// One compressor of the chain as the decision sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// Its `content-encoding` (`gzip`, `br`, `zstd`).
    pub encoding: &'a str,
    /// Whether it may compress this response's content type.
    pub allows_content_type: bool,
    pub choose_first: bool,
}

/// Why the decision came out as it did (Envoy's `header_*` counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A compressor the client named.
    Valid,
    /// The client prefers `identity`.
    Identity,
    /// The client accepts anything (`*`): the first compressor of the chain.
    Wildcard,
    /// Nothing acceptable (no token, none with q > 0, no compressor left).
    NotValid,
}

/// The chosen encoding (`identity` for none) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<'a> {
    pub encoding: &'a str,
    pub reason: Reason,
}

/// One `accept-encoding` token: its coding and q-value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Token<'a> {
    pub coding: &'a str,
    pub q: f32,
}

/// The tokens of an `accept-encoding` value, in order. As Envoy reads them: split on `,`
/// (empty pieces dropped), the coding is what precedes the first `;` (trimmed), and a
/// `q=` parameter right after it sets the weight (1 otherwise); a token whose q-value does
/// not parse is dropped.
pub fn tokens(value: &str) -> Vec<Token<'_>> {
    value
        .split(',')
        .filter(|token| !token.is_empty())
        .filter_map(|token| {
            let (coding, params) = match token.split_once(';') {
                Some((coding, params)) => (coding, Some(params)),
                None => (token, None),
            };
            let mut q = 1.0;
            if let Some((name, value)) = params.and_then(|p| p.split_once('='))
                && name.trim().eq_ignore_ascii_case("q")
            {
                q = value.trim().parse::<f32>().ok()?;
            }
            Some(Token { coding: coding.trim(), q })
        })
        .collect()
}

/// Envoy's choice among `candidates` (the chain's compressors, in filter order) for a
/// client that sent `accept_encoding`.
pub fn choose<'a>(accept_encoding: &str, candidates: &[Candidate<'a>]) -> Decision<'a> {
    const IDENTITY: &str = "identity";
    const WILDCARD: &str = "*";
    let not_valid = Decision { encoding: IDENTITY, reason: Reason::NotValid };
    // The compressors that may take part: one per encoding (the first registered wins),
    // those whose content types admit the response.
    let mut allowed: Vec<Candidate<'a>> = Vec::new();
    for candidate in candidates.iter().filter(|c| c.allows_content_type) {
        if !allowed.iter().any(|a| a.encoding == candidate.encoding) {
            allowed.push(*candidate);
        }
    }
    let tokens = tokens(accept_encoding);
    // `q=0` rules a coding out, even for a later `*`.
    for token in tokens.iter().filter(|t| t.q == 0.0) {
        allowed.retain(|a| a.encoding != token.coding);
    }
    if tokens.is_empty() || allowed.is_empty() {
        return not_valid;
    }
    let mut choice = Token { coding: IDENTITY, q: 0.0 };
    let mut chosen_first = false;
    for token in &tokens {
        let compressor = allowed.iter().find(|a| a.encoding == token.coding);
        let acceptable = compressor.is_some() || token.coding == IDENTITY || token.coding == WILDCARD;
        let first = compressor.is_some_and(|c| c.choose_first);
        // Strictly higher wins; on a tie, a `choose_first` compressor takes over.
        let better = token.q > choice.q || (token.q == choice.q && token.q > 0.0 && first);
        if acceptable && better && !(token.q == choice.q && chosen_first && !first) {
            choice = *token;
            chosen_first = first;
        }
    }
    if choice.q <= 0.0 || choice.q.is_nan() {
        return not_valid;
    }
    if choice.coding == IDENTITY {
        return Decision { encoding: IDENTITY, reason: Reason::Identity };
    }
    if choice.coding == WILDCARD {
        // `allowed` is in registration order: the first compressor of the chain.
        return allowed
            .first()
            .map_or(not_valid, |first| Decision { encoding: first.encoding, reason: Reason::Wildcard });
    }
    match allowed.iter().find(|a| a.encoding == choice.coding) {
        Some(compressor) => Decision { encoding: compressor.encoding, reason: Reason::Valid },
        None => not_valid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> Vec<Candidate<'static>> {
        ["br", "zstd", "gzip"]
            .into_iter()
            .map(|encoding| Candidate { encoding, allows_content_type: true, choose_first: false })
            .collect()
    }

    fn decide(accept: &str) -> (&'static str, Reason) {
        let decision = choose(accept, &chain());
        (decision.encoding, decision.reason)
    }

    #[test]
    fn tokens_parse_as_envoy_reads_them() {
        assert_eq!(tokens("gzip;q=0.5, br"), vec![Token { coding: "gzip", q: 0.5 }, Token { coding: "br", q: 1.0 }]);
        assert_eq!(tokens(" gzip ; Q = 0 ,,"), vec![Token { coding: "gzip", q: 0.0 }]);
        // Another parameter leaves the weight at 1; a q that does not parse drops the token.
        assert_eq!(tokens("gzip;level=1, br;q=x"), vec![Token { coding: "gzip", q: 1.0 }]);
        assert!(tokens("").is_empty());
    }

    #[test]
    fn the_decision_table() {
        assert_eq!(decide("gzip"), ("gzip", Reason::Valid));
        assert_eq!(decide("br"), ("br", Reason::Valid));
        assert_eq!(decide("zstd"), ("zstd", Reason::Valid));
        assert_eq!(decide("gzip;q=0.5, br;q=0.9"), ("br", Reason::Valid));
        // A tie goes to the client's first.
        assert_eq!(decide("gzip, br"), ("gzip", Reason::Valid));
        assert_eq!(decide("*"), ("br", Reason::Wildcard));
        assert_eq!(decide("br;q=0, *"), ("zstd", Reason::Wildcard));
        assert_eq!(decide("identity"), ("identity", Reason::Identity));
        assert_eq!(decide("gzip;q=0"), ("identity", Reason::NotValid));
        assert_eq!(decide("deflate"), ("identity", Reason::NotValid));
        assert_eq!(decide(""), ("identity", Reason::NotValid));
        // Codings are compared as sent.
        assert_eq!(decide("GZIP"), ("identity", Reason::NotValid));
    }

    #[test]
    fn content_types_and_duplicates_narrow_the_chain() {
        let mut chain = chain();
        chain[0].allows_content_type = false;
        assert_eq!(choose("*", &chain).encoding, "zstd");
        assert_eq!(choose("br", &chain).reason, Reason::NotValid);
    }

    #[test]
    fn choose_first_breaks_ties() {
        let mut chain = chain();
        chain[2].choose_first = true;
        assert_eq!(choose("br, gzip", &chain).encoding, "gzip");
        assert_eq!(choose("br, gzip;q=0.5", &chain).encoding, "br");
    }
}
