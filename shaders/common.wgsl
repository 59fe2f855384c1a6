// Shared math for the elementwise and attention kernels (no bindings).

// tanh that stays finite for large |x| (exp overflow would give inf/inf).
fn tanh_safe(x: f32) -> f32 {
    let e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

fn silu(x: f32) -> f32 {
    return x / (1.0 + exp(-x));
}

// ggml's tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
fn gelu(x: f32) -> f32 {
    return 0.5 * x * (1.0 + tanh_safe(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
