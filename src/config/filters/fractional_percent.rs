//! `envoy.type.v3.FractionalPercent`: the share of requests a filter acts on (fault
//! injection, local rate limits, CORS), drawn per request as Envoy draws it.

/// `numerator / denominator`, the denominator being 100, 10 000 or 1 000 000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FractionalPercent {
    pub numerator: u32,
    pub denominator: u32,
}

impl FractionalPercent {
    pub const ALL: Self = Self { numerator: 100, denominator: 100 };
    pub const NONE: Self = Self { numerator: 0, denominator: 100 };

    /// Envoy's `evaluateFractionalPercent`: a request is in when `random % denominator`
    /// is below the numerator (so a numerator at or above the denominator takes all).
    pub fn includes(&self, random: u64) -> bool {
        random.checked_rem(u64::from(self.denominator)).is_some_and(|r| r < u64::from(self.numerator))
    }

    /// Whether the answer never depends on the draw.
    pub fn is_all(&self) -> bool {
        self.numerator >= self.denominator
    }

    pub fn is_none(&self) -> bool {
        self.numerator == 0
    }

    /// The same denominator with a lower numerator (header-controlled percentages may only
    /// lower the configured one).
    pub fn at_most(&self, numerator: u32) -> Self {
        Self { numerator: self.numerator.min(numerator), denominator: self.denominator }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_follow_envoy() {
        let half = FractionalPercent { numerator: 50, denominator: 100 };
        assert!(half.includes(49));
        assert!(!half.includes(50));
        assert!(half.includes(149));
        assert!(FractionalPercent::ALL.includes(99));
        assert!(!FractionalPercent::NONE.includes(0));
        let over = FractionalPercent { numerator: 200, denominator: 100 };
        assert!(over.is_all() && over.includes(99));
        assert_eq!(half.at_most(10).numerator, 10);
        assert_eq!(half.at_most(90).numerator, 50);
    }
}
