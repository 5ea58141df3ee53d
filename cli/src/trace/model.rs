//! The slowdown model: how a hold's time grows with the units held beside it on its GPU,
//! `g(o) = max(1 + a x o, (u + o) / s)`, and the span it predicts for a pool of another size
//! (see the [module docs](crate::trace#the-slowdown-model)). Fitted in `fit.rs`, replayed in
//! `replay.rs`.

/// How hold times grow with concurrency: a hold of `u` units that takes `d` alone takes
/// `d x max(1 + factor x o, (u + o) / max(saturation, u))` while other holds keep `o` units of
/// its GPU busy on average (see the [module docs](crate::trace#the-slowdown-model)).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Slowdown {
    /// The fitted factor `a`: 0, hold times do not depend on concurrency; 1, every unit held
    /// beside a hold slows it as much as running one more test's hold after it (the GPU's
    /// throughput is fixed).
    pub factor: f64,
    /// The low end of the factor's range (5th percentile of a bootstrap over tests or holds).
    pub low: f64,
    /// The high end of the factor's range (95th percentile).
    pub high: f64,
    /// The GPU's throughput, in units of holds running at full speed: with more units busy
    /// than this, each hold slows in proportion (`(u + o) / saturation`), whatever `factor`
    /// says. Fitted where the trace shows it; where it does not (the throughput kept growing
    /// up to the highest concurrency seen), the most the trace showed: the model promises no
    /// more throughput than the GPU delivered. `None`: no such bound (a [`given`](Self::given)
    /// factor, or [`SlowdownBasis::NotIdentified`], whose range already runs to "throughput
    /// fixed").
    pub saturation: Option<f64>,
    /// The saturation at the slow end of the range (5th percentile of the bootstrap), used
    /// with [`high`](Self::high).
    pub saturation_low: Option<f64>,
    /// The saturation at the fast end of the range, used with [`low`](Self::low): the 95th
    /// percentile of the bootstrap where the trace shows the bound, `None` (unbounded: the
    /// throughput keeps growing as `factor` says) where it does not.
    pub saturation_high: Option<f64>,
    /// What the fit rests on.
    pub basis: SlowdownBasis,
}

/// What a [`Slowdown`] was fitted from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlowdownBasis {
    /// `tests` tests held permits at concurrencies at least half a unit apart (several runs
    /// traced into one file, or tests that take permits repeatedly): each test keeps its own
    /// time alone and the factor is shared. The strongest basis.
    RepeatedTests {
        /// Tests the fit used.
        tests: usize,
    },
    /// `holds` holds ran at different concurrencies (a run with idle stretches, a long tail):
    /// fitted across tests, assuming that the tests which ran at low and at high concurrency
    /// would take alike alone.
    Overlap {
        /// Holds the fit used.
        holds: usize,
    },
    /// Every hold ran at about the same concurrency (a saturated run, or N = 1), so the trace
    /// cannot tell how hold times grow with it. The factor is the middle of the range from 0
    /// (hold times fixed) to 1 (the GPU's throughput fixed), and the range is all of it.
    NotIdentified,
    /// Given, not fitted ([`Slowdown::given`]).
    Given,
}

/// A [`Slowdown`] model's estimate of a run's span with `n` permits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Prediction {
    /// Permits in the pool (N per GPU times the GPUs).
    pub n: usize,
    /// Estimated span at the fitted factor and saturation, microseconds.
    pub span_us: u64,
    /// The span at the fast end of the model's range, microseconds.
    pub low_us: u64,
    /// The span at the slow end of the model's range, microseconds.
    pub high_us: u64,
}

impl Slowdown {
    /// A factor known from elsewhere, with no range; `Slowdown::given(0.0)` keeps hold times
    /// as they were.
    pub fn given(factor: f64) -> Slowdown {
        Slowdown {
            factor,
            low: factor,
            high: factor,
            saturation: None,
            saturation_low: None,
            saturation_high: None,
            basis: SlowdownBasis::Given,
        }
    }

    /// This model with the GPU's throughput bounded at `saturation` units of holds at full
    /// speed, at both ends of the range too (see [`saturation`](Self::saturation)).
    ///
    /// ```
    /// use gpu_test_permit_cli::trace::Slowdown;
    /// let s = Slowdown::given(0.1).with_saturation(2.0);
    /// assert_eq!(s.slowdown(1.0, 1), 1.1); // two holds: 1 + 0.1 x 1
    /// assert_eq!(s.slowdown(3.0, 1), 2.0); // four holds: 4 / 2
    /// assert_eq!(s.slowdown(0.0, 4), 1.0); // a 4-unit hold alone runs at full speed
    /// ```
    pub fn with_saturation(self, saturation: f64) -> Slowdown {
        let s = Some(saturation.max(1.0));
        Slowdown {
            saturation: s,
            saturation_low: s,
            saturation_high: s,
            ..self
        }
    }

    /// How many times as long as alone a hold of `units` takes with `others` units held
    /// beside it on its GPU, at the point estimate.
    pub fn slowdown(&self, others: f64, units: usize) -> f64 {
        Curve::new(self.factor, self.saturation).g(others, units)
    }

    /// The point estimate and the fast and slow ends of the range.
    pub(super) fn curves(&self) -> [Curve; 3] {
        [
            Curve::new(self.factor, self.saturation),
            Curve::new(self.low, self.saturation_high),
            Curve::new(self.high, self.saturation_low),
        ]
    }
}

/// The slowdown curve of one end of a [`Slowdown`]'s range: `g(o, u) = max(1 + a x o,
/// (u + o) / max(s, u))` for a hold of `u` units with `o` beside it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Curve {
    a: f64,
    saturation: Option<f64>,
}

impl Curve {
    pub(super) fn new(a: f64, saturation: Option<f64>) -> Curve {
        Curve { a, saturation }
    }

    pub(super) fn g(&self, others: f64, units: usize) -> f64 {
        let linear = 1.0 + self.a * others;
        match self.saturation {
            Some(s) => {
                let units = units as f64;
                linear.max((units + others) / s.max(units))
            }
            None => linear,
        }
    }
}
