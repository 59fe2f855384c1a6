//! LFM2's short causal convolution over time with a per-sequence state
//! (see [`glint_backend::Backend::short_conv`]).

/// `x`, `out`: `[n, m]`; `kernel`: `[l, n]`; `state`: `[(l - 1) * n,
/// n_slots]`; `slots`: `[m]`. Tokens in order (a sequence's tokens read the
/// state its earlier tokens left); within a token the channels are
/// independent. The sum runs over the window in order, as ggml's
/// `ssm_conv` does: the `d = l - 1` state values, then the new input.
pub fn short_conv(
    x: &[f32],
    kernel: &[f32],
    state: &mut [f32],
    slots: &[i32],
    [n, l]: [usize; 2],
    out: &mut [f32],
) {
    let d = l - 1;
    let n_slots = state.len() / (d * n);
    for (i, &s) in slots.iter().enumerate() {
        let (xi, oi) = (&x[i * n..(i + 1) * n], &mut out[i * n..(i + 1) * n]);
        if s < 0 || s as usize >= n_slots {
            oi.fill(0.0);
            continue;
        }
        let st = &mut state[s as usize * d * n..(s as usize + 1) * d * n];
        for c in 0..n {
            let (w, k) = (&mut st[c * d..(c + 1) * d], &kernel[c * l..(c + 1) * l]);
            let mut sum = 0.0f32;
            for j in 0..d {
                sum += w[j] * k[j];
            }
            sum += xi[c] * k[d];
            oi[c] = sum;
            w.copy_within(1.., 0);
            w[d - 1] = xi[c];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two interleaved sequences: each token's output is the convolution of
    /// its own sequence's last inputs, and the state ends holding them.
    #[test]
    fn interleaved_sequences_keep_their_own_windows() {
        let (n, l) = (2, 3);
        // kernel [l, n]: channel 0 = [1, 10, 100], channel 1 = [2, 0, -1].
        let kernel = [1.0, 10.0, 100.0, 2.0, 0.0, -1.0];
        // x [n, m]: tokens of slots 0, 1, 0, 1, 0.
        let x = [1.0, 5.0, 2.0, 6.0, 3.0, 7.0, 4.0, 8.0, 9.0, 1.5];
        let slots = [0, 1, 0, 1, 0];
        let mut state = vec![0.0f32; 2 * n * 2];
        let mut out = vec![0.0f32; 10];
        short_conv(&x, &kernel, &mut state, &slots, [n, l], &mut out);
        // Slot 0 channel 0 inputs 1, 3, 9: outputs 100, 10 + 300, 1 + 30 + 900.
        assert_eq!([out[0], out[4], out[8]], [100.0, 310.0, 931.0]);
        // Slot 1 channel 0 inputs 2, 4: 200, 20 + 400.
        assert_eq!([out[2], out[6]], [200.0, 420.0]);
        // Slot 0 channel 1 inputs 5, 7, 1.5: -5, -7, 2*5 - 1.5.
        assert_eq!([out[1], out[5], out[9]], [-5.0, -7.0, 8.5]);
        // state [d * n, slot]: slot 0 = ch0 [3, 9], ch1 [7, 1.5].
        assert_eq!(&state[..4], &[3.0, 9.0, 7.0, 1.5]);
        assert_eq!(&state[4..], &[2.0, 4.0, 6.0, 8.0]);
        // A slot out of range: zeros, no state touched.
        let before = state.clone();
        short_conv(&x[..2], &kernel, &mut state, &[5], [n, l], &mut out[..2]);
        assert_eq!((&out[..2], &state), (&[0.0, 0.0][..], &before));
    }
}
