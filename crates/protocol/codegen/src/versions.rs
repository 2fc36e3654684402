//! Version ranges as the specs write them: `3`, `3-7`, `3+`, `none`.

use std::fmt;

/// An inclusive range of versions; `None` in `max` means "and every later version".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versions {
    None,
    Range { min: i16, max: Option<i16> },
}

impl Versions {
    pub const ALL: Versions = Versions::Range { min: 0, max: None };

    pub fn parse(text: &str) -> Result<Versions, String> {
        let bad = || format!("bad version range {text:?} (expected N, N-M, N+ or none)");
        if text == "none" {
            return Ok(Versions::None);
        }
        if let Some(min) = text.strip_suffix('+') {
            let min = min.parse().map_err(|_| bad())?;
            return Ok(Versions::Range { min, max: None });
        }
        if let Some((lo, hi)) = text.split_once('-') {
            let min: i16 = lo.parse().map_err(|_| bad())?;
            let max: i16 = hi.parse().map_err(|_| bad())?;
            if max < min {
                return Err(bad());
            }
            return Ok(Versions::Range { min, max: Some(max) });
        }
        let v = text.parse().map_err(|_| bad())?;
        Ok(Versions::Range { min: v, max: Some(v) })
    }

    pub fn contains(self, v: i16) -> bool {
        match self {
            Versions::None => false,
            Versions::Range { min, max } => v >= min && max.is_none_or(|m| v <= m),
        }
    }

    /// This range cut to `within` (a message's valid versions), as concrete bounds.
    pub fn clamp(self, within: (i16, i16)) -> Option<(i16, i16)> {
        match self {
            Versions::None => None,
            Versions::Range { min, max } => {
                let lo = min.max(within.0);
                let hi = max.unwrap_or(i16::MAX).min(within.1);
                (lo <= hi).then_some((lo, hi))
            }
        }
    }

    /// A Rust boolean expression testing `var` against this range within `within`.
    pub fn condition(self, var: &str, within: (i16, i16)) -> String {
        match self.clamp(within) {
            None => "false".to_string(),
            Some((lo, hi)) if lo <= within.0 && hi >= within.1 => "true".to_string(),
            Some((lo, hi)) if lo <= within.0 => format!("{var} <= {hi}"),
            Some((lo, hi)) if hi >= within.1 => format!("{var} >= {lo}"),
            Some((lo, hi)) if lo == hi => format!("{var} == {lo}"),
            Some((lo, hi)) => format!("({lo}..={hi}).contains(&{var})"),
        }
    }
}

impl fmt::Display for Versions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Versions::None => write!(f, "none"),
            Versions::Range { min, max: None } => write!(f, "{min}+"),
            Versions::Range { min, max: Some(m) } if m == min => write!(f, "{min}"),
            Versions::Range { min, max: Some(m) } => write!(f, "{min}-{m}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(Versions::parse("none").unwrap(), Versions::None);
        assert_eq!(Versions::parse("3+").unwrap(), Versions::Range { min: 3, max: None });
        assert_eq!(Versions::parse("3-7").unwrap(), Versions::Range { min: 3, max: Some(7) });
        assert_eq!(Versions::parse("4").unwrap(), Versions::Range { min: 4, max: Some(4) });
        assert!(Versions::parse("7-3").is_err());
        assert!(Versions::parse("x").is_err());
    }

    #[test]
    fn conditions_drop_bounds_the_message_already_implies() {
        let v = Versions::parse("3+").unwrap();
        assert_eq!(v.condition("version", (0, 11)), "version >= 3");
        assert_eq!(v.condition("version", (3, 11)), "true");
        assert_eq!(Versions::parse("0-12").unwrap().condition("version", (0, 13)), "version <= 12");
        assert_eq!(Versions::parse("7-12").unwrap().condition("v", (0, 13)), "(7..=12).contains(&v)");
        assert_eq!(Versions::None.condition("v", (0, 3)), "false");
        assert!(Versions::parse("1").unwrap().contains(1));
        assert!(!Versions::parse("1").unwrap().contains(2));
    }
}
