//! e5's encoder (post-LayerNorm BERT layers) over 4-bit weights with 8-bit activations
//! (`q4`), in plain loops: the path a question takes. Each window runs at its own length
//! (no padding, no mask), and its attention is a few hundred dot products a head, so
//! nothing here needs a tensor library; what costs is the products of `q4`.

use super::q4::Q4Matrix;

/// A LayerNorm's scale and shift.
pub(super) struct Norm {
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
}

impl Norm {
    fn apply(&self, x: &mut [f32], eps: f32) {
        let width = self.weight.len();
        for row in x.chunks_exact_mut(width) {
            let mean = row.iter().sum::<f32>() / width as f32;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / width as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for ((v, w), b) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
                *v = (*v - mean) * inv * w + b;
            }
        }
    }
}

pub(super) struct Layer {
    /// Query, key and value projections stacked: `3 × hidden` outputs.
    pub qkv: Q4Matrix,
    pub attention_out: Q4Matrix,
    pub attention_norm: Norm,
    pub up: Q4Matrix,
    pub down: Q4Matrix,
    pub out_norm: Norm,
}

pub(super) struct Encoder {
    pub layers: Vec<Layer>,
    pub heads: usize,
    pub eps: f32,
    /// Position rows (`hidden` each), from position 0.
    pub positions: Vec<f32>,
    /// The row of token type 0.
    pub token_type: Vec<f32>,
    pub embedding_norm: Norm,
}

impl Encoder {
    fn hidden(&self) -> usize {
        self.token_type.len()
    }

    /// The mean hidden state of each window, given its tokens' word embeddings (the
    /// windows one after another, `lengths` tokens each).
    pub(super) fn means(&self, mut x: Vec<f32>, lengths: &[usize]) -> Vec<Vec<f32>> {
        let hidden = self.hidden();
        debug_assert_eq!(x.len(), lengths.iter().sum::<usize>() * hidden);
        let mut rows = x.chunks_exact_mut(hidden);
        for &len in lengths {
            for (position, row) in rows.by_ref().take(len).enumerate() {
                let at = &self.positions[position * hidden..][..hidden];
                for ((v, p), t) in row.iter_mut().zip(at).zip(&self.token_type) {
                    *v += p + t;
                }
            }
        }
        self.embedding_norm.apply(&mut x, self.eps);
        for layer in &self.layers {
            x = self.layer(layer, x, lengths);
        }
        let mut out = Vec::with_capacity(lengths.len());
        let mut rows = x.chunks_exact(hidden);
        for &len in lengths {
            let mut mean = vec![0f32; hidden];
            for row in rows.by_ref().take(len) {
                mean.iter_mut().zip(row).for_each(|(m, v)| *m += v);
            }
            mean.iter_mut().for_each(|m| *m /= len.max(1) as f32);
            out.push(mean);
        }
        out
    }

    fn layer(&self, l: &Layer, x: Vec<f32>, lengths: &[usize]) -> Vec<f32> {
        let qkv = l.qkv.product_then(&x, |_| {});
        let context = self.attention(&qkv, lengths);
        let mut x = add(x, &l.attention_out.product_then(&context, |_| {}));
        l.attention_norm.apply(&mut x, self.eps);
        let mid = l.up.product_then(&x, gelu_all);
        let mut x = add(x, &l.down.product_then(&mid, |_| {}));
        l.out_norm.apply(&mut x, self.eps);
        x
    }

    /// Each window's tokens attend to that window's tokens, head by head.
    fn attention(&self, qkv: &[f32], lengths: &[usize]) -> Vec<f32> {
        let hidden = self.hidden();
        let head = hidden / self.heads;
        let scale = 1.0 / (head as f32).sqrt();
        let tokens: usize = lengths.iter().sum();
        let mut context = vec![0f32; tokens * hidden];
        let row = |t: usize, part: usize, h: usize| {
            &qkv[t * 3 * hidden + part * hidden + h * head..][..head]
        };
        let mut scores = Vec::new();
        let mut start = 0;
        for &len in lengths {
            for h in 0..self.heads {
                for i in start..start + len {
                    let q = row(i, 0, h);
                    scores.clear();
                    scores.extend((start..start + len).map(|j| dot(q, row(j, 1, h)) * scale));
                    softmax(&mut scores);
                    let out = &mut context[i * hidden + h * head..][..head];
                    for (j, p) in (start..start + len).zip(&scores) {
                        out.iter_mut()
                            .zip(row(j, 2, h))
                            .for_each(|(o, v)| *o += p * v);
                    }
                }
            }
            start += len;
        }
        context
    }
}

fn add(mut x: Vec<f32>, y: &[f32]) -> Vec<f32> {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
    x
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn softmax(v: &mut [f32]) {
    let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut total = 0.0;
    for x in v.iter_mut() {
        *x = (*x - max).exp();
        total += *x;
    }
    v.iter_mut().for_each(|x| *x /= total);
}

/// GELU over a slice, vectorised where AVX2 is.
fn gelu_all(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::q4::avx2_fma() {
        #[allow(unsafe_code)]
        // SAFETY: the CPU has AVX2 and FMA, checked just above.
        unsafe {
            gelu_avx2(x)
        };
        return;
    }
    x.iter_mut().for_each(|v| *v = gelu(*v));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_avx2(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = gelu(*v));
}

/// GELU with the error function, as BERT's `gelu` is. The error function is Abramowitz
/// and Stegun's 7.1.26 (absolute error under 1.5e-7) over `exp_negative`: no branch and
/// no library call, so a loop over a slice vectorises (libm's `erff` took a sixth of a
/// question's time).
#[inline(always)]
fn gelu(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_7,
        -1.453_152,
        1.061_405_4,
    ];
    // erf(4) is 1 in f32; the clamp keeps exp's argument in range.
    let z = (x * std::f32::consts::FRAC_1_SQRT_2).abs().min(4.0);
    let t = 1.0 / (1.0 + P * z);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let erf = 1.0 - poly * exp_negative(-z * z);
    0.5 * x * (1.0 + erf.copysign(x))
}

/// e^y for y in [-16, 0]: 2^n by the exponent bits times e^r, |r| ≤ ln 2 / 2, by its
/// Taylor series to r⁶ (relative error under 2e-7).
#[inline(always)]
fn exp_negative(y: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let n = (y * std::f32::consts::LOG2_E + 0.5).floor();
    let r = y - n * LN2_HI - n * LN2_LO;
    let series = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    series * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_and_gelu_are_the_textbook_ones() {
        let mut v = vec![1.0, 2.0, 3.0];
        softmax(&mut v);
        assert!((v.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((v[2] - 0.665_240_9).abs() < 1e-6);
        assert!((gelu(1.0) - 0.841_344_7).abs() < 1e-6);
        assert!((gelu(-3.0) + 0.004_049_7).abs() < 1e-6);
        assert_eq!(gelu(0.0), 0.0);
    }

    /// Against the error function of libm, every 0.001 from -12 to 12, by both paths.
    #[test]
    fn gelu_is_the_exact_one_within_float_rounding() {
        let xs: Vec<f32> = (-12_000..=12_000).map(|i| i as f32 / 1000.0).collect();
        let mut fast = xs.clone();
        gelu_all(&mut fast);
        for (x, got) in xs.iter().zip(&fast) {
            let exact = 0.5 * f64::from(*x) * (1.0 + libm::erf(f64::from(*x) / 2f64.sqrt()));
            let error = (f64::from(*got) - exact).abs();
            assert!(
                error < 1e-6 * f64::from(x.abs()).max(1.0),
                "gelu({x}) = {got}, not {exact}"
            );
            assert_eq!(*got, gelu(*x), "the vector path is the scalar one");
        }
        for y in [-16.0f32, -10.0, -1.0, -0.1, 0.0] {
            let error = (exp_negative(y) / y.exp() - 1.0).abs();
            assert!(error < 3e-7, "exp({y}): {error}");
        }
    }

    #[test]
    fn a_norm_centres_and_scales_each_row() {
        let norm = Norm {
            weight: vec![2.0; 4],
            bias: vec![1.0; 4],
        };
        let mut x = vec![1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0, 5.0];
        norm.apply(&mut x, 1e-12);
        let first: f32 = x[..4].iter().sum();
        assert!((first - 4.0).abs() < 1e-5, "mean of the first row: bias");
        assert!(
            x[4..].iter().all(|v| (v - 1.0).abs() < 1e-5),
            "a flat row is the bias"
        );
    }
}
