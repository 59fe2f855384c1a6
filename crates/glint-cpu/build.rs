//! Tells the tests which x86_64 tiers of `qdot` this machine runs: cfg
//! `host_avx2` (AVX2, FMA, F16C), `host_avx512` (AVX-512 F and DQ too:
//! attention's 512-bit kernels), `host_vnni` (AVX-512 F, BW, VL, VNNI
//! too) and `host_amx` (AMX-TILE and AMX-INT8 too, on Linux), so that a test of a tier the cpu lacks is reported as ignored,
//! with its reason, instead of passing without checking anything. The
//! library itself detects the cpu at run time and does not read these.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(host_avx2)");
    println!("cargo::rustc-check-cfg=cfg(host_vnni)");
    println!("cargo::rustc-check-cfg=cfg(host_avx512)");
    println!("cargo::rustc-check-cfg=cfg(host_amx)");
    println!("cargo::rerun-if-changed=build.rs");
    // Only when the tests run where they are built.
    if std::env::var("TARGET").ok() != std::env::var("HOST").ok() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! all {
            ($($f:tt),*) => { $(std::is_x86_feature_detected!($f))&&* };
        }
        let avx2 = all!("avx2", "fma", "f16c");
        let vnni = avx2 && all!("avx512f", "avx512bw", "avx512vl", "avx512vnni");
        if avx2 {
            println!("cargo::rustc-cfg=host_avx2");
        }
        if vnni {
            println!("cargo::rustc-cfg=host_vnni");
        }
        if avx2 && all!("avx512f", "avx512dq") {
            println!("cargo::rustc-cfg=host_avx512");
        }
        // cpuid leaf 7: EDX bits 24 (AMX-TILE) and 25 (AMX-INT8); the
        // AMX path's vector steps need AVX-512 F, BW, VL, VNNI too, and only
        // Linux grants the tile state (glint_cpu::amx::available).
        // SAFETY: cpuid exists on every x86_64 cpu (a safe fn from 1.94).
        #[allow(unused_unsafe)]
        let l7 = unsafe { std::arch::x86_64::__cpuid_count(7, 0) };
        if vnni && (l7.edx >> 24) & 3 == 3 && cfg!(target_os = "linux") {
            println!("cargo::rustc-cfg=host_amx");
        }
    }
}
