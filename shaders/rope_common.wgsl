// RoPE angle with ggml's semantics (YaRN included); no bindings. The
// including kernel declares `p` with the fields used here.
//   theta_extrap = pos * theta_scale^i, theta_scale = freq_base^(-2/n_rot)
//   theta_interp = freq_scale * theta_extrap
//   ext_factor != 0: ramp-mixed theta, mscale *= 1 + 0.1 ln(1/freq_scale)
// rope_theta gives theta; rope_mscale the factor a rotation is multiplied by
// (attn_factor, times the YaRN factor when ext_factor != 0).
fn rope_theta(pos: f32, i: u32) -> f32 {
    let theta_extrap = pos * pow(p.theta_scale, f32(i));
    let theta_interp = p.freq_scale * theta_extrap;
    if (p.ext_factor == 0.0) {
        return theta_interp;
    }
    let y = (f32(i) - p.corr_lo) / max(0.001, p.corr_hi - p.corr_lo);
    let ramp = (1.0 - clamp(y, 0.0, 1.0)) * p.ext_factor;
    return theta_interp * (1.0 - ramp) + theta_extrap * ramp;
}

fn rope_mscale() -> f32 {
    if (p.ext_factor == 0.0) {
        return p.attn_factor;
    }
    return p.attn_factor * (1.0 + 0.1 * log(1.0 / p.freq_scale));
}

// Element indices (within a head) of rotation pair i.
fn rope_pair(i: u32) -> vec2<u32> {
    if (p.mode == 0u) {
        return vec2<u32>(2u * i, 2u * i + 1u);
    }
    return vec2<u32>(i, i + p.n_rot / 2u);
}
