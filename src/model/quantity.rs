//! Resource quantities (`100m`, `0.5`, `1Gi`, `2e3`) as kube's `resource.Quantity` parses and
//! compares them, for what the server computes from them (a pod's QoS class). A quantity is held
//! exactly as an integer count of nano-units (10⁻⁹), the finest scale upstream keeps; finer digits
//! round up, as upstream rounds a quantity it cannot hold exactly.
// Reads outside input (request bodies): it must not panic on any of it.
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

/// A parsed quantity in nano-units. Values beyond ±2¹²⁷ nano-units (far past anything a real
/// resource holds) saturate, so sums and comparisons never overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Quantity(i128);

/// Most digits read from a number: more cannot change a comparison between real quantities, and
/// bounds the work on hostile input.
const MAX_DIGITS: usize = 64;

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity(0);

    /// Parses upstream's quantity syntax: an optional sign, digits with an optional fraction, then
    /// a binary suffix (`Ki` … `Ei`), a decimal one (`n`, `u`, `m`, `k`, `M`, `G`, `T`, `P`, `E`) or
    /// an exponent (`e3`, `E-2`). `None` for anything else, as upstream refuses it.
    pub fn parse(s: &str) -> Option<Quantity> {
        let (negative, rest) = match s.as_bytes().first()? {
            b'-' => (true, s.get(1..)?),
            b'+' => (false, s.get(1..)?),
            _ => (false, s),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty())
            || fraction.contains('.')
            || whole.len() + fraction.len() > MAX_DIGITS
        {
            return None;
        }
        // The number as digits × 10^exp10, times 2^exp2 for binary suffixes.
        let (exp10, exp2): (i32, u32) = match suffix {
            "" => (0, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            other => {
                let e = other.strip_prefix(['e', 'E'])?;
                let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
                if digits.is_empty()
                    || digits.len() > 3
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return None;
                }
                (e.parse::<i32>().ok()?, 0)
            }
        };
        let mut mantissa: i128 = 0;
        for b in whole.bytes().chain(fraction.bytes()) {
            mantissa = mantissa
                .saturating_mul(10)
                .saturating_add(i128::from(b - b'0'));
        }
        // Nano-units: shift by 9 decimal places, less the fraction's digits.
        let shift = exp10 + 9 - i32::try_from(fraction.len()).ok()?;
        let scale = 10i128.checked_pow(shift.unsigned_abs());
        let mut nanos = match (shift >= 0, scale) {
            (true, Some(p)) => mantissa.saturating_mul(p),
            (true, None) if mantissa == 0 => 0,
            (true, None) => i128::MAX,
            // Rounded up, as upstream rounds a value finer than nano-units.
            (false, Some(d)) => mantissa / d + i128::from(mantissa % d != 0),
            (false, None) => i128::from(mantissa != 0),
        };
        nanos = nanos.saturating_mul(1i128.checked_shl(exp2).unwrap_or(i128::MAX));
        Some(Quantity(if negative { -nanos } else { nanos }))
    }

    /// The sum, saturating.
    #[must_use]
    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity(self.0.saturating_add(other.0))
    }

    /// Whether the quantity is above zero.
    pub fn is_positive(self) -> bool {
        self.0 > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|| panic!("{s} parses"))
    }

    #[test]
    fn equal_quantities_in_different_spellings_compare_equal() {
        assert_eq!(q("100m"), q("0.1"));
        assert_eq!(q("1"), q("1000m"));
        assert_eq!(q("1Ki"), q("1024"));
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("1k"), q("1e3"));
        assert_eq!(q("1.5"), q("1500m"));
        assert_eq!(q("2E-3"), q("2m"));
        assert_eq!(q("1n"), Quantity(1));
        assert!(q("1.0000000001") > q("1"), "finer than nano rounds up");
        assert!(q("128Mi") < q("1Gi"));
        assert!(q("-1") < Quantity::ZERO && !q("0").is_positive());
    }

    #[test]
    fn bad_spellings_are_refused_and_huge_ones_saturate() {
        for bad in [
            "", "m", "1.2.3", "1Qi", "1 Gi", "--1", "1e", "1e+", "1e1000", ".", "abc",
        ] {
            assert_eq!(Quantity::parse(bad), None, "{bad}");
        }
        let huge = "9".repeat(60);
        assert!(q(&format!("{huge}Ei")) > q("1Ei"));
        assert_eq!(Quantity::parse(&"9".repeat(65)), None);
        assert_eq!(q("1e-900"), Quantity(1), "rounded up to a nano-unit");
        assert!(q("1e900") > q("1Ei"));
    }
}
