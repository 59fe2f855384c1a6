//! Prefill products on Intel AMX: the 32-element block types (Q4_0, Q4_1,
//! Q5_0, Q5_1, Q8_0) against their Q8 activations, one tile product per
//! block, with ggml's reference numerics bit for bit.
//!
//! A tile product (`tdpbssd`) multiplies [`TOKENS`] activation rows of one
//! block (A: 16 rows × 32 signed levels, read straight from the quantized
//! activations) with [`ROWS`] weight rows of the same block (B: their signed
//! levels in AMX's "VNNI" layout, unpacked once per band of rows) into 16 ×
//! 16 exact i32 sums, the `sumi` of ggml's loops. Each is then scaled and
//! added in f32 exactly as `glint_quant::vec_dot` adds a block's term
//! ([`Order`]), blocks in order, from 0.0: the same operations on the same
//! numbers, so the same bits as the reference loops (the tests hold them
//! equal), where the vector kernels differ from them by rounding.
//!
//! | piece | what |
//! | --- | --- |
//! | [`available`] | cpuid AMX-TILE + AMX-INT8, the OS's XCR0 tile bits, and the kernel's permission (`arch_prctl`) |
//! | `Band` | 16 weight rows unpacked: `[nb][8][16][4]` i8 levels, `dx`, `mx` `[nb][16]` |
//! | `Product` | the activations as the tiles read them, and the scales `dy`, `sy` `[groups][nb][16]` |
//! | [`Unit`] | who forms the i32 tile: the AMX instructions, or [`Unit::Model`], the same sums in plain Rust (any cpu) |
//!
//! Work is split by bands of weight rows, each unpacked once and passed over
//! every group of 16 activation columns.

#![allow(unsafe_code)]

use glint_backend::GgmlType;
use half::f16;
use rayon::prelude::*;

/// Weight rows of one band: the columns of the tile product's B and C.
pub const ROWS: usize = 16;
/// Activation columns (tokens) of one group: the rows of A and C.
pub const TOKENS: usize = 16;
/// Elements of one quant block: the K of one tile product.
const QK: usize = 32;
/// Bytes of one block of a band's levels: `[QK / 4][ROWS][4]` i8.
const BAND_BLOCK: usize = QK * ROWS;

/// Who forms each block's `[TOKENS][ROWS]` i32 sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// The AMX-INT8 instructions (only where [`available`]).
    Amx,
    /// The same exact sums in plain Rust, on any cpu: the AMX path's twin
    /// (for tests; slow).
    Model,
}

/// How a type's reference loop forms one block's term from its `sumi`
/// (f32 operations in this order, no fused multiply-add).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// `sumi * dx * dy` (Q4_0).
    SumiDx,
    /// `(dx * dy) * sumi` (Q5_0, Q8_0).
    DxDy,
    /// `(dx * dy) * sumi + mx * sy` (Q4_1, Q5_1, against Q8_1).
    DxDyMin,
}

/// A type's facts for the tiles: weight block bytes, activation block
/// bytes, where the activation levels start, the term's order.
fn params(ty: GgmlType) -> Option<(usize, usize, usize, Order)> {
    use GgmlType as T;
    Some(match ty {
        T::Q4_0 => (18, 34, 2, Order::SumiDx),
        T::Q5_0 => (22, 34, 2, Order::DxDy),
        T::Q8_0 => (34, 34, 2, Order::DxDy),
        T::Q4_1 => (20, 36, 4, Order::DxDyMin),
        T::Q5_1 => (24, 36, 4, Order::DxDyMin),
        _ => return None,
    })
}

/// Whether [`mul_mat`] takes weights of `ty`.
pub fn supports(ty: GgmlType) -> bool {
    params(ty).is_some()
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// One weight block's 32 signed levels (what ggml's loop multiplies:
/// `level - bias`), and its `d` and `m` (0 for the types without a min).
fn unpack(ty: GgmlType, xb: &[u8], out: &mut [i8; QK]) -> (f32, f32) {
    use GgmlType as T;
    // (nibbles at, high bits at, bias, has min)
    let (qs_at, qh_at, bias, min) = match ty {
        T::Q4_0 => (2, None, 8, false),
        T::Q4_1 => (4, None, 0, true),
        T::Q5_0 => (6, Some(2), 16, false),
        T::Q5_1 => (8, Some(4), 0, true),
        _ => {
            // Q8_0: the levels as stored.
            for (o, &q) in out.iter_mut().zip(&xb[2..2 + QK]) {
                *o = q as i8;
            }
            return (f16_at(xb, 0), 0.0);
        }
    };
    let qh = qh_at.map_or(0, |at| {
        u32::from_le_bytes([xb[at], xb[at + 1], xb[at + 2], xb[at + 3]])
    });
    let qs = &xb[qs_at..qs_at + QK / 2];
    for j in 0..QK / 2 {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        out[j] = ((qs[j] & 0x0f) as i32 | h0 as i32) as i8 - bias;
        out[j + 16] = ((qs[j] >> 4) as i32 | h1 as i32) as i8 - bias;
    }
    (f16_at(xb, 0), if min { f16_at(xb, 2) } else { 0.0 })
}

/// [`ROWS`] weight rows (fewer at the end of a matrix: the rest zeros),
/// unpacked for the tiles.
struct Band {
    /// levels: `[nb][QK / 4][ROWS][4]` i8: element `k` of row `r` of block
    /// `b` at `b * BAND_BLOCK + (k / 4) * 64 + r * 4 + k % 4` (B's layout).
    levels: Vec<i8>,
    /// dx, mx: `[nb][ROWS]` f32, each row's block scale and min.
    dx: Vec<f32>,
    mx: Vec<f32>,
}

impl Band {
    fn new(nb: usize) -> Self {
        Band {
            levels: vec![0; nb * BAND_BLOCK],
            dx: vec![0.0; nb * ROWS],
            mx: vec![0.0; nb * ROWS],
        }
    }

    /// Rows `rows` (`rows.len() / row_bytes` of them, at most [`ROWS`]).
    fn fill(&mut self, ty: GgmlType, x_size: usize, rows: &[u8], row_bytes: usize) {
        let nb = row_bytes / x_size;
        let nr = rows.len() / row_bytes;
        let mut lv = [0i8; QK];
        for b in 0..nb {
            let blk = &mut self.levels[b * BAND_BLOCK..(b + 1) * BAND_BLOCK];
            for r in 0..ROWS {
                let (d, m) = if r < nr {
                    let at = r * row_bytes + b * x_size;
                    unpack(ty, &rows[at..at + x_size], &mut lv)
                } else {
                    lv = [0; QK];
                    (0.0, 0.0)
                };
                for (k, &v) in lv.iter().enumerate() {
                    blk[(k / 4) * (4 * ROWS) + r * 4 + k % 4] = v;
                }
                self.dx[b * ROWS + r] = d;
                self.mx[b * ROWS + r] = m;
            }
        }
    }
}

/// The activations of one product as the tiles read them.
struct Acts<'a> {
    /// act: `[m]` rows of `act_bytes` (quantized, Q8_0 or Q8_1 blocks);
    /// tail: the last partial group's rows, zero-padded to [`TOKENS`].
    act: &'a [u8],
    tail: Vec<u8>,
    act_bytes: usize,
    y_size: usize,
    y_at: usize,
    m: usize,
    /// dy, sy: `[groups][nb][TOKENS]` f32, each column's block scale and
    /// (Q8_1) `s`; 0 on the padding.
    dy: Vec<f32>,
    sy: Vec<f32>,
}

impl<'a> Acts<'a> {
    fn new(act: &'a [u8], act_bytes: usize, m: usize, y_size: usize, y_at: usize) -> Self {
        let nb = act_bytes / y_size;
        let groups = m.div_ceil(TOKENS);
        let full = m / TOKENS * TOKENS;
        let mut tail = vec![0u8; if full < m { TOKENS * act_bytes } else { 0 }];
        tail[..(m - full) * act_bytes].copy_from_slice(&act[full * act_bytes..m * act_bytes]);
        let mut dy = vec![0f32; groups * nb * TOKENS];
        let mut sy = vec![0f32; groups * nb * TOKENS];
        for c in 0..m {
            let (g, j) = (c / TOKENS, c % TOKENS);
            for b in 0..nb {
                let at = c * act_bytes + b * y_size;
                dy[(g * nb + b) * TOKENS + j] = f16_at(act, at);
                if y_at == 4 {
                    sy[(g * nb + b) * TOKENS + j] = f16_at(act, at + 2);
                }
            }
        }
        Acts {
            act,
            tail,
            act_bytes,
            y_size,
            y_at,
            m,
            dy,
            sy,
        }
    }

    /// Group `g`'s [`TOKENS`] rows (`TOKENS * act_bytes` bytes).
    fn group(&self, g: usize) -> &[u8] {
        let at = g * TOKENS * self.act_bytes;
        if at + TOKENS * self.act_bytes <= self.m * self.act_bytes {
            &self.act[at..at + TOKENS * self.act_bytes]
        } else {
            &self.tail
        }
    }
}

/// `out[c * n + r] = w row r · act column c` for `n` rows of `ty` (a type
/// [`supports`] takes; `row_bytes` each, checked by the caller against
/// `act_bytes`) and `m` quantized activation columns, through `unit`;
/// bands of [`ROWS`] rows on the current rayon pool when `par`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mul_mat(
    unit: Unit,
    par: bool,
    ty: GgmlType,
    w: &[u8],
    row_bytes: usize,
    n: usize,
    act: &[u8],
    act_bytes: usize,
    m: usize,
    out: &mut [f32],
) {
    let Some((x_size, y_size, y_at, order)) = params(ty) else {
        panic!("amx::mul_mat: no tile kernel for {ty}");
    };
    assert!(
        unit == Unit::Model || available(),
        "amx::mul_mat: no AMX on this cpu"
    );
    let nb = row_bytes / x_size;
    assert_eq!(act_bytes, nb * y_size, "amx::mul_mat: act rows");
    assert!(w.len() >= n * row_bytes && act.len() >= m * act_bytes && out.len() >= n * m);
    let acts = Acts::new(act, act_bytes, m, y_size, y_at);
    let bands = n.div_ceil(ROWS);
    let threads = if par {
        rayon::current_num_threads().max(1)
    } else {
        1
    };
    let per_task = bands.div_ceil(4 * threads).max(1);
    let dst = Dst(out.as_mut_ptr(), n, m);
    let run = |t: usize| {
        let mut band = Band::new(nb);
        for bi in t * per_task..((t + 1) * per_task).min(bands) {
            let r0 = bi * ROWS;
            let nr = ROWS.min(n - r0);
            band.fill(
                ty,
                x_size,
                &w[r0 * row_bytes..(r0 + nr) * row_bytes],
                row_bytes,
            );
            pass(unit, order, &band, &acts, nb, r0, nr, dst);
        }
    };
    let tasks = bands.div_ceil(per_task);
    if par {
        (0..tasks).into_par_iter().for_each(run);
    } else {
        (0..tasks).for_each(run);
    }
}

/// The output `[m, n]` f32 (columns of `n`), written by bands: each band
/// task writes only its own rows `r0..r0 + nr` of every column.
#[derive(Clone, Copy)]
struct Dst(*mut f32, usize, usize);

// SAFETY: the tasks holding a `Dst` write disjoint elements (their own
// rows) of one buffer that outlives them (`mul_mat` waits for them all).
unsafe impl Send for Dst {}
unsafe impl Sync for Dst {}

impl Dst {
    /// Column `c`, rows `r0..r0 + v.len()` = `v`.
    fn put(self, c: usize, r0: usize, v: &[f32]) {
        let (n, m) = (self.1, self.2);
        assert!(c < m && r0 + v.len() <= n);
        // SAFETY: in bounds (checked above; the buffer holds `n * m`), and
        // no other task writes these rows (see `Dst`).
        unsafe {
            std::ptr::copy_nonoverlapping(v.as_ptr(), self.0.add(c * n + r0), v.len());
        }
    }
}

/// One band against every group of columns.
#[allow(clippy::too_many_arguments)]
fn pass(
    unit: Unit,
    order: Order,
    band: &Band,
    acts: &Acts,
    nb: usize,
    r0: usize,
    nr: usize,
    dst: Dst,
) {
    match unit {
        #[cfg(target_arch = "x86_64")]
        Unit::Amx => {
            // SAFETY: `mul_mat` asserted `available()`: the cpu has AMX-INT8
            // and AVX-512 F, and the kernel granted the tile state.
            unsafe { x86::pass_amx(order, band, acts, nb, r0, nr, dst) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Unit::Amx => unreachable!("no AMX off x86_64"),
        Unit::Model => pass_with(order, band, acts, nb, r0, nr, dst, model_tile),
    }
}

/// [`pass`] with `tile(a, a_stride, b, c)`, which sets `c[j][r]` to the
/// exact `sum_k a[j * a_stride + k] * level(b, r, k)` over the block's
/// 32 elements (`a`: the group's first activation level of the block;
/// `b`: one `BAND_BLOCK` of the band).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pass_with(
    order: Order,
    band: &Band,
    acts: &Acts,
    nb: usize,
    r0: usize,
    nr: usize,
    dst: Dst,
    mut tile: impl FnMut(&[u8], usize, &[i8], &mut [[i32; ROWS]; TOKENS]),
) {
    let groups = acts.m.div_ceil(TOKENS);
    let mut c = [[0i32; ROWS]; TOKENS];
    for g in 0..groups {
        let rows = acts.group(g);
        let mut acc = [[0f32; ROWS]; TOKENS];
        for b in 0..nb {
            let a = &rows[b * acts.y_size + acts.y_at..];
            tile(
                a,
                acts.act_bytes,
                &band.levels[b * BAND_BLOCK..(b + 1) * BAND_BLOCK],
                &mut c,
            );
            let s = (g * nb + b) * TOKENS;
            let (dy, sy) = (&acts.dy[s..s + TOKENS], &acts.sy[s..s + TOKENS]);
            let dx: &[f32; ROWS] = band.dx[b * ROWS..(b + 1) * ROWS].try_into().unwrap();
            let mx: &[f32; ROWS] = band.mx[b * ROWS..(b + 1) * ROWS].try_into().unwrap();
            match order {
                Order::SumiDx => add_terms(&mut acc, &c, |j, r, s| s * dx[r] * dy[j]),
                Order::DxDy => add_terms(&mut acc, &c, |j, r, s| (dx[r] * dy[j]) * s),
                Order::DxDyMin => {
                    add_terms(&mut acc, &c, |j, r, s| (dx[r] * dy[j]) * s + mx[r] * sy[j])
                }
            }
        }
        for (j, a) in acc.iter().enumerate().take(acts.m - g * TOKENS) {
            dst.put(g * TOKENS + j, r0, &a[..nr]);
        }
    }
}

/// `acc[j][r] += term(j, r, c[j][r] as f32)` (an add after the term, as
/// ggml's `sumf +=`).
#[inline(always)]
fn add_terms(
    acc: &mut [[f32; ROWS]; TOKENS],
    c: &[[i32; ROWS]; TOKENS],
    term: impl Fn(usize, usize, f32) -> f32,
) {
    for j in 0..TOKENS {
        for r in 0..ROWS {
            acc[j][r] += term(j, r, c[j][r] as f32);
        }
    }
}

/// [`Unit::Model`]'s tile: the sums in plain Rust (exact in i32: at most
/// 32 · 128 · 128 in magnitude).
fn model_tile(a: &[u8], a_stride: usize, b: &[i8], c: &mut [[i32; ROWS]; TOKENS]) {
    for (j, cj) in c.iter_mut().enumerate() {
        let aj = &a[j * a_stride..j * a_stride + QK];
        for (r, v) in cj.iter_mut().enumerate() {
            *v = (0..QK)
                .map(|k| aj[k] as i8 as i32 * b[(k / 4) * (4 * ROWS) + r * 4 + k % 4] as i32)
                .sum();
        }
    }
}

/// Whether this cpu and OS run the AMX path: AMX-TILE and AMX-INT8 (cpuid),
/// AVX-512 F/BW/VL (the float steps), the OS enabling the tile state in
/// XCR0, and Linux granting this process the tile data (`arch_prctl`).
/// Detected once.
pub fn available() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(x86::detect)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::asm;
    use std::arch::x86_64::*;

    /// See [`super::available`].
    #[cfg(target_os = "linux")]
    pub(super) fn detect() -> bool {
        // cpuid leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8; leaf 1: ECX bit 27 OSXSAVE.
        let (l1, l7) = (__cpuid(1), __cpuid_count(7, 0));
        let amx = (l7.edx >> 24) & 3 == 3;
        let osxsave = (l1.ecx >> 27) & 1 == 1;
        let avx512 = std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl");
        if !(amx && osxsave && avx512) {
            return false;
        }
        // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS saves the tiles.
        // SAFETY: OSXSAVE is set, so xgetbv runs.
        let xcr0 = unsafe { xgetbv0() };
        if (xcr0 >> 17) & 3 != 3 {
            return false;
        }
        // arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): Linux (5.16+)
        // gives a process the tile data only on request; 0 means granted.
        let ret: i64;
        // SAFETY: a plain syscall with integer arguments; it touches no
        // memory of ours and clobbers rcx and r11 (declared).
        unsafe {
            asm!(
                "syscall",
                inlateout("rax") 158i64 => ret,
                in("rdi") 0x1023i64,
                in("rsi") 18i64,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret == 0
    }

    #[target_feature(enable = "xsave")]
    #[cfg(target_os = "linux")]
    unsafe fn xgetbv0() -> u64 {
        // SAFETY: the caller checked OSXSAVE.
        unsafe { _xgetbv(0) }
    }

    /// The tile configuration: palette 1; tmm0 A (TOKENS rows × 32 bytes),
    /// tmm1 B (8 rows × 64 bytes), tmm2 C (TOKENS rows × 64 bytes).
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    fn config() -> Config {
        let mut c = [0u8; 64];
        c[0] = 1; // palette
        let tiles: [(u16, u8); 3] = [
            (QK as u16, TOKENS as u8),
            (64, (QK / 4) as u8),
            (64, TOKENS as u8),
        ];
        for (t, (colsb, rows)) in tiles.into_iter().enumerate() {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&colsb.to_le_bytes());
            c[48 + t] = rows;
        }
        Config(c)
    }

    /// [`super::pass`] on the AMX unit: each block's tile product is
    /// issued before the float steps of the block before it (two C
    /// buffers), so the tiles' latency hides behind the vector work; the
    /// float steps are [`super::pass_with`]'s, element for element, on
    /// 16-lane vectors (one a column: its 16 rows).
    ///
    /// # Safety
    /// Only where [`super::available`] said yes.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn pass_amx(
        order: Order,
        band: &Band,
        acts: &Acts,
        nb: usize,
        r0: usize,
        nr: usize,
        dst: Dst,
    ) {
        match order {
            Order::SumiDx => pass_amx_with::<0>(band, acts, nb, r0, nr, dst),
            Order::DxDy => pass_amx_with::<1>(band, acts, nb, r0, nr, dst),
            Order::DxDyMin => pass_amx_with::<2>(band, acts, nb, r0, nr, dst),
        }
    }

    /// The first 16 floats of `v`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_ps(v: &[f32]) -> __m512 {
        assert!(v.len() >= 16);
        // SAFETY: 16 floats in bounds (asserted); loadu needs no alignment.
        unsafe { _mm512_loadu_ps(v.as_ptr()) }
    }

    /// The 16 lanes of `v`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_epi32(v: &[i32; 16]) -> __m512i {
        // SAFETY: 64 bytes in bounds; loadu needs no alignment.
        unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
    }

    /// `out = x`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn store_ps(out: &mut [f32; 16], x: __m512) {
        // SAFETY: 64 writable bytes; storeu needs no alignment.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), x) }
    }

    /// [`pass_amx`] for one [`Order`] (`ORDER`: its index).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    fn pass_amx_with<const ORDER: u8>(
        band: &Band,
        acts: &Acts,
        nb: usize,
        r0: usize,
        nr: usize,
        dst: Dst,
    ) {
        let cfg = config();
        // SAFETY: the cpu has AMX and the process the tile state (the
        // caller's promise); the configuration is valid for palette 1.
        unsafe { asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
        assert!(band.levels.len() >= nb * BAND_BLOCK && band.dx.len() >= nb * ROWS);
        assert!(band.mx.len() >= nb * ROWS);
        let groups = acts.m.div_ceil(TOKENS);
        // c: two blocks' sums, `[2][TOKENS][ROWS]` i32.
        let mut c = [[[0i32; ROWS]; TOKENS]; 2];
        for g in 0..groups {
            let rows = acts.group(g);
            // A reads TOKENS rows of 32 bytes at act_bytes from each block's
            // levels: all inside `rows` (TOKENS rows of act_bytes).
            assert!(rows.len() >= TOKENS * acts.act_bytes && nb * acts.y_size <= acts.act_bytes);
            assert!(acts.dy.len() >= (g + 1) * nb * TOKENS && acts.sy.len() == acts.dy.len());
            let mut acc = [_mm512_setzero_ps(); TOKENS];
            for b in 0..=nb {
                if b < nb {
                    let a = rows[b * acts.y_size + acts.y_at..].as_ptr();
                    let bw = band.levels[b * BAND_BLOCK..].as_ptr();
                    // SAFETY: the configuration is loaded on this thread;
                    // the reads stay inside `rows` and the band (asserted
                    // above), the write inside `c[b % 2]`; the tile
                    // registers are no one else's.
                    unsafe {
                        asm!(
                            "tileloadd tmm0, [{a} + {sa} * 1]",
                            "tileloadd tmm1, [{b} + {sb} * 1]",
                            "tilezero tmm2",
                            "tdpbssd tmm2, tmm0, tmm1",
                            "tilestored [{c} + {sb} * 1], tmm2",
                            a = in(reg) a,
                            sa = in(reg) acts.act_bytes,
                            b = in(reg) bw,
                            sb = in(reg) 64usize,
                            c = in(reg) c[b % 2].as_mut_ptr(),
                            options(nostack),
                        );
                    }
                }
                if b == 0 {
                    continue;
                }
                // The float steps of block b - 1.
                let p = b - 1;
                let cp = &c[p % 2];
                let dx = load_ps(&band.dx[p * ROWS..]);
                let mx = load_ps(&band.mx[p * ROWS..]);
                let s = (g * nb + p) * TOKENS;
                for j in 0..TOKENS {
                    let cj = _mm512_cvtepi32_ps(load_epi32(&cp[j]));
                    let dy = _mm512_set1_ps(acts.dy[s + j]);
                    let t = match ORDER {
                        0 => _mm512_mul_ps(_mm512_mul_ps(cj, dx), dy),
                        1 => _mm512_mul_ps(_mm512_mul_ps(dx, dy), cj),
                        _ => {
                            let sy = _mm512_set1_ps(acts.sy[s + j]);
                            let min = _mm512_mul_ps(mx, sy);
                            _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(dx, dy), cj), min)
                        }
                    };
                    acc[j] = _mm512_add_ps(acc[j], t);
                }
            }
            let mut v = [0f32; ROWS];
            for (j, a) in acc.iter().enumerate().take(acts.m - g * TOKENS) {
                store_ps(&mut v, *a);
                dst.put(g * TOKENS + j, r0, &v[..nr]);
            }
        }
        // SAFETY: as above; releases the tile state.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}
