//! WGSL sources and the tiny preprocessor that turns a file and a variant
//! into one module's text.
//!
//! Every `.wgsl` file lives under the top-level `shaders/` folder and is
//! compiled in with `include_str!`. Two preprocessor directives, applied
//! before naga sees the text:
//! - `#include "path.wgsl"` (paths relative to `shaders/`, each file
//!   included once per module);
//! - defines: whole-word token replacement of `NAME` by a value given by the
//!   launcher (used for `TYPE_FILE`, the weight format's dequant file from
//!   glint-quant's type table: `#include "TYPE_FILE"`);
//! - `#ifdef FLAG` / `#ifndef FLAG` / `#else` / `#endif` on the flags of the
//!   pipeline: the variants that use an optional device feature
//!   ([`F16`]: `enable f16;` is prepended; [`SUBGROUPS`]).
//!
//! A module for a weight format also gets that format's block size and bytes
//! per block from the type table, as WGSL constants (`BLOCK_SIZE`,
//! `TYPE_SIZE`) ahead of the text: the dequant files hard-code no sizes.

use std::collections::HashSet;

use glint_backend::GgmlType;

/// `(path, text)` of each file, embedded from the top-level `shaders/`.
macro_rules! sources {
    ($($path:literal),* $(,)?) => {
        &[$(($path, include_str!(concat!("../../../shaders/", $path)))),*]
    };
}

/// Every shader file, by its path under `shaders/`.
const SOURCES: &[(&str, &str)] = sources![
    "index.wgsl",
    "common.wgsl",
    "reduce.wgsl",
    "binary.wgsl",
    "unary.wgsl",
    "rms_norm.wgsl",
    "softmax.wgsl",
    "argmax.wgsl",
    "top_k.wgsl",
    "get_rows.wgsl",
    "mul_mat.wgsl",
    "matvec_cols.wgsl",
    "matvec_fused.wgsl",
    "rope_common.wgsl",
    "rope.wgsl",
    "rope_store.wgsl",
    "kshift.wgsl",
    "set_rows.wgsl",
    "short_conv.wgsl",
    "attention.wgsl",
    "attention_combine.wgsl",
    "kv_quant.wgsl",
    "kq_mask.wgsl",
    "copy.wgsl",
    "quant/common.wgsl",
    "quant/block.wgsl",
    "quant/pair.wgsl",
    "quant/pair_plain.wgsl",
    "quant/pair_scaled.wgsl",
    "quant/pair_nibbles.wgsl",
    "quant/pair_k_nibbles.wgsl",
    "quant/q8_dot.wgsl",
    "quant/f32.wgsl",
    "quant/f16.wgsl",
    "quant/bf16.wgsl",
    "quant/q4_0.wgsl",
    "quant/q4_1.wgsl",
    "quant/q5_0.wgsl",
    "quant/q5_1.wgsl",
    "quant/q8_0.wgsl",
    "quant/q2_k.wgsl",
    "quant/q3_k.wgsl",
    "quant/q4_k.wgsl",
    "quant/q5_k.wgsl",
    "quant/q6_k.wgsl",
];

/// The text of a module: `file` preprocessed for weight format `ty` (if it
/// takes one) and `flags`, with `ty`'s sizes from the type table as
/// constants after the `enable` directives.
pub fn module_source(file: &str, ty: Option<GgmlType>, flags: &[&str]) -> Result<String, String> {
    let Some(ty) = ty else {
        return preprocess(file, &[], flags);
    };
    let info = ty.info();
    let wgsl = info
        .wgsl
        .ok_or_else(|| format!("no kernel for {}", info.name))?;
    let text = preprocess(file, &[("TYPE_FILE", wgsl)], flags)?;
    let header = format!(
        "// {}, from glint-quant's type table.\n\
         const BLOCK_SIZE: u32 = {}u; // elements per block\n\
         const TYPE_SIZE: u32 = {}u; // bytes per block\n",
        info.name, info.block_size, info.type_size
    );
    // `enable` directives come before every declaration.
    let enables = if flags.contains(&F16) {
        ENABLE_F16.len()
    } else {
        0
    };
    Ok(format!("{}{header}{}", &text[..enables], &text[enables..]))
}

fn source(path: &str) -> Option<&'static str> {
    SOURCES.iter().find(|(p, _)| *p == path).map(|(_, s)| *s)
}

/// Replace whole-word occurrences of each define's name by its value.
fn apply_defines(text: &str, defines: &[(&str, &str)]) -> String {
    let mut s = text.to_string();
    for (name, value) in defines {
        let mut out = String::with_capacity(s.len());
        let mut rest = s.as_str();
        while let Some(i) = rest.find(name) {
            let before = rest[..i].chars().next_back();
            let after = rest[i + name.len()..].chars().next();
            let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            out.push_str(&rest[..i]);
            if word(before) || word(after) {
                out.push_str(name);
            } else {
                out.push_str(value);
            }
            rest = &rest[i + name.len()..];
        }
        out.push_str(rest);
        s = out;
    }
    s
}

/// Expand `#include`s (each file once) and the conditional blocks
/// `#ifdef NAME` / `#ifndef NAME` / `#else` / `#endif` (nestable; `NAME` is
/// one of `flags`), applying the defines to every other line.
pub fn preprocess(path: &str, defines: &[(&str, &str)], flags: &[&str]) -> Result<String, String> {
    struct Pp<'a> {
        defines: &'a [(&'a str, &'a str)],
        flags: &'a [&'a str],
        seen: HashSet<String>,
        out: String,
    }
    fn expand(pp: &mut Pp<'_>, path: &str) -> Result<(), String> {
        if !pp.seen.insert(path.to_string()) {
            return Ok(());
        }
        let text = source(path).ok_or_else(|| format!("no shader file `{path}`"))?;
        // One entry per open conditional: (this branch taken, the parent active).
        let mut stack: Vec<(bool, bool)> = Vec::new();
        let active = |st: &[(bool, bool)]| st.last().is_none_or(|&(t, parent)| t && parent);
        for (no, line) in text.lines().enumerate() {
            let t = line.trim();
            let err = |what: &str| format!("{path}:{}: {what}", no + 1);
            let cond = t
                .strip_prefix("#ifdef ")
                .map(|n| (n, true))
                .or_else(|| t.strip_prefix("#ifndef ").map(|n| (n, false)));
            if let Some((name, want)) = cond {
                let parent = active(&stack);
                stack.push((pp.flags.contains(&name.trim()) == want, parent));
            } else if t == "#else" {
                let top = stack
                    .last_mut()
                    .ok_or_else(|| err("#else without #ifdef"))?;
                top.0 = !top.0;
            } else if t == "#endif" {
                stack.pop().ok_or_else(|| err("#endif without #ifdef"))?;
            } else if !active(&stack) {
                continue;
            } else if let Some(rest) = t.strip_prefix("#include") {
                let inc = apply_defines(rest.trim().trim_matches('"'), pp.defines);
                expand(pp, &inc)?;
            } else if pp.flags.contains(&IMMEDIATES) && is_params_binding(t) {
                pp.out.push_str(PARAMS_IMMEDIATE);
                pp.out.push('\n');
            } else {
                pp.out.push_str(&apply_defines(line, pp.defines));
                pp.out.push('\n');
            }
        }
        if !stack.is_empty() {
            return Err(format!("{path}: #ifdef without #endif"));
        }
        Ok(())
    }
    let mut pp = Pp {
        defines,
        flags,
        seen: HashSet::new(),
        out: String::new(),
    };
    // `enable` directives come before every declaration.
    if flags.contains(&F16) {
        pp.out.push_str(ENABLE_F16);
    }
    expand(&mut pp, path)?;
    Ok(pp.out)
}

/// Flag: the kernel reads F16 data as `f16` (`enable f16;` is prepended).
pub const F16: &str = "SHADER_F16";
const ENABLE_F16: &str = "enable f16;\n";
/// Flag: the kernel's reductions use subgroup operations.
pub const SUBGROUPS: &str = "USE_SUBGROUPS";
/// Flag: the kernel's params are the dispatch's immediate data: every
/// kernel declares them as its last binding,
/// `@group(0) @binding(N) var<uniform> p: Params;`, and that line becomes
/// [`PARAMS_IMMEDIATE`] (the bind group then ends at the outputs).
pub const IMMEDIATES: &str = "IMMEDIATES";
const PARAMS_IMMEDIATE: &str = "var<immediate> p: Params;";

/// Whether a (trimmed) line declares a kernel's params block.
fn is_params_binding(t: &str) -> bool {
    t.starts_with("@group(0) @binding(") && t.ends_with("var<uniform> p: Params;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defines_replace_whole_words_only() {
        let s = apply_defines("quant/TYPE.wgsl TYPES MY_TYPE TYPE", &[("TYPE", "q8_0")]);
        assert_eq!(s, "quant/q8_0.wgsl TYPES MY_TYPE q8_0");
    }

    #[test]
    fn includes_expand_once() {
        let s = module_source("mul_mat.wgsl", Some(GgmlType::Q4_0), &[]).unwrap();
        assert!(!s.contains("#include"));
        assert_eq!(s.matches("fn byte_at").count(), 1);
        assert!(s.contains("const TYPE_SIZE: u32 = 18u;"));
        assert!(s.contains("const BLOCK_SIZE: u32 = 32u;"));
    }

    #[test]
    fn flags_pick_the_variant() {
        let plain = preprocess("attention.wgsl", &[], &[]).unwrap();
        let both = preprocess("attention.wgsl", &[], &[F16, SUBGROUPS]).unwrap();
        assert!(!plain.contains("k: array<f16>") && !plain.contains("enable f16"));
        assert!(!plain.contains("subgroupMax(") && !plain.contains("@builtin(subgroup"));
        assert!(plain.contains("k: array<u32>") && plain.contains("unpack2x16float"));
        assert!(both.starts_with("enable f16;\n"));
        assert!(both.contains("k: array<f16>") && !both.contains("k: array<u32>"));
        assert!(both.contains("subgroupMax(") && both.contains("@builtin(subgroup_size)"));
        assert!(!both.contains('#'), "a directive was left in");
        let mv = module_source("mul_mat.wgsl", Some(GgmlType::F16), &[F16]).unwrap();
        assert!(mv.starts_with("enable f16;\n// F16, from"));
        assert!(mv.contains("W: array<f16>") && !mv.contains("fn u32_at"));
    }

    /// With IMMEDIATES, every kernel file's params (`var<uniform> p`, its
    /// last binding, in each of its variants) become immediate data: no
    /// uniform is left for the bind group the launcher no longer makes,
    /// and the params fit the 128 bytes a dispatch sets.
    #[test]
    fn immediates_take_every_kernels_params() {
        let own = ["ADD", "GLU", "THREE", "WINDOW", "P8", "NORM", "POST", "Q8"];
        for (path, text) in SOURCES {
            if !text.contains("@compute") || *path == "copy.wgsl" {
                continue;
            }
            let has = |f: &&&str| text.contains(&format!("#ifdef {f}"));
            for f in std::iter::once(None).chain(own.iter().filter(has).map(Some)) {
                let mut flags = vec![IMMEDIATES];
                flags.extend(f.copied());
                if f == Some(&"POST") {
                    flags.extend(["NORM", "P8"]);
                }
                if f == Some(&"Q8") {
                    flags.push("P8");
                }
                let s = module_source(path, Some(GgmlType::Q8_0), &flags).unwrap();
                assert!(!s.contains("var<uniform>"), "{path} {flags:?}");
                assert_eq!(s.matches(PARAMS_IMMEDIATE).count(), 1, "{path} {flags:?}");
                let without = module_source(path, Some(GgmlType::Q8_0), &flags[1..]).unwrap();
                assert_eq!(without.matches("var<uniform> p: Params;").count(), 1);
                // The params fit the immediate data a dispatch sets.
                let module = naga::front::wgsl::parse_str(&s).unwrap();
                let (_, var) = module
                    .global_variables
                    .iter()
                    .find(|(_, v)| v.space == naga::AddressSpace::Immediate)
                    .unwrap();
                let size = module.types[var.ty].inner.size(module.to_ctx());
                assert!(
                    size <= crate::submit::IMMEDIATE_BYTES,
                    "{path} {flags:?}: {size} bytes"
                );
            }
        }
    }

    #[test]
    fn every_file_preprocesses_under_every_flag_set() {
        for (path, _) in SOURCES {
            for flags in [&[][..], &[F16], &[SUBGROUPS], &[F16, SUBGROUPS]] {
                let s = module_source(path, Some(GgmlType::F16), flags)
                    .unwrap_or_else(|e| panic!("{path} {flags:?}: {e}"));
                assert!(!s.contains("#if") && !s.contains("#e"), "{path} {flags:?}");
            }
        }
    }

    /// `src` parsed, validated (f16 and subgroups allowed: the adapter's
    /// features decide whether a variant with them is asked for), and
    /// written as SPIR-V, MSL 2.4 and HLSL shader model 6.2, the override
    /// constants at the WGSL's defaults but for `constants`.
    fn translate(src: &str, constants: &[(&str, f64)]) -> Result<(), String> {
        use naga::back::{hlsl, msl, spv};
        use naga::valid::{Capabilities, ValidationFlags, Validator};
        let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
        // SHADER_FLOAT16_IN_FLOAT32 (unpack2x16float and kin): wgpu grants it
        // wherever the downlevel flag of that name is set, every Vulkan,
        // Metal and DX12 adapter.
        let caps = Capabilities::SHADER_FLOAT16
            | Capabilities::SUBGROUP
            | Capabilities::SHADER_FLOAT16_IN_FLOAT32
            | Capabilities::IMMEDIATES;
        let info = Validator::new(ValidationFlags::all(), caps)
            .validate(&module)
            .map_err(|e| format!("validation: {:?}", e.into_inner()))?;
        let constants = constants.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        let (module, info) =
            naga::back::pipeline_constants::process_overrides(&module, &info, None, &constants)
                .map_err(|e| format!("overrides: {e}"))?;
        spv::write_vec(&module, &info, &spv::Options::default(), None)
            .map_err(|e| format!("SPIR-V: {e}"))?;
        let mo = msl::Options {
            lang_version: (2, 4),
            ..Default::default()
        };
        msl::write_string(&module, &info, &mo, &msl::PipelineOptions::default())
            .map_err(|e| format!("MSL: {e}"))?;
        // Immediates: a root constant at b0 of a space of their own, as
        // wgpu's DX12 backend places them.
        let ho = hlsl::Options {
            shader_model: hlsl::ShaderModel::V6_2,
            immediates_target: Some(hlsl::BindTarget {
                space: 1,
                register: 0,
                binding_array_size: None,
                dynamic_storage_buffer_offsets_index: None,
                restrict_indexing: false,
            }),
            ..Default::default()
        };
        let po = hlsl::PipelineOptions::default();
        let mut out = String::new();
        hlsl::Writer::new(&mut out, &ho, &po)
            .write(&module, &info, None)
            .map_err(|e| format!("HLSL: {e}"))?;
        Ok(())
    }

    /// The text of `path` and of every file it includes, the format's
    /// file (`TYPE_FILE`) aside.
    fn with_includes(path: &str) -> String {
        let mut seen = HashSet::new();
        let mut out = String::new();
        let mut todo = vec![path.to_string()];
        while let Some(p) = todo.pop() {
            if p == "TYPE_FILE" || !seen.insert(p.clone()) {
                continue;
            }
            let text = source(&p).unwrap_or_else(|| panic!("no {p}"));
            for line in text.lines() {
                if let Some(inc) = line.trim().strip_prefix("#include \"") {
                    todo.push(inc.trim_end_matches('"').to_string());
                }
            }
            out.push_str(text);
        }
        out
    }

    /// Every kernel variant the backend can ask for translates through
    /// naga to SPIR-V, MSL and HLSL, so no kernel works on Vulkan alone:
    /// each module file (a file with an entry point), each weight format of
    /// the typed ones, with and without SHADER_F16 (typed kernels: F16
    /// weights only, as `ops::flags` asks for it), USE_SUBGROUPS and
    /// IMMEDIATES, and every set of the file's own flags. Variants whose
    /// text is the same are translated once.
    #[test]
    fn every_variant_translates_to_spirv_msl_and_hlsl() {
        const OWN: [&str; 12] = [
            "ADD", "GLU", "THREE", "WINDOW", "P8", "NORM", "POST", "SGROW", "Q8", "Q8W", "TL", "PS",
        ];
        // Flags that are only ever asked for with others (a variant
        // without them is never made: POST's and Q8's shaders refuse to
        // compile without P8; SGROW's subgroup rows need subgroups; PS
        // is a flag of the P8 pairs).
        const NEEDS: [(&str, &[&str]); 5] = [
            ("POST", &["NORM", "P8"]),
            ("SGROW", &[SUBGROUPS]),
            ("Q8", &["P8"]),
            ("Q8W", &["Q8"]),
            ("PS", &["P8"]),
        ];
        let mut seen = std::collections::HashSet::new();
        let mut failed = Vec::new();
        for (path, text) in SOURCES {
            if !text.contains("@compute") {
                continue;
            }
            let typed = text.contains("TYPE_FILE");
            let types: Vec<Option<GgmlType>> = if typed {
                glint_quant::TYPES
                    .iter()
                    .filter(|i| i.wgsl.is_some())
                    .map(|i| Some(i.ty))
                    .collect()
            } else {
                vec![None]
            };
            // The flags the file tests, and PS and Q8W where a file it
            // includes does (matvec_cols.wgsl: the two matvec modules).
            let all = with_includes(path);
            let own: Vec<&str> = OWN
                .iter()
                .filter(|f| {
                    let test = format!("#ifdef {f}");
                    let nested = ["PS", "Q8W"].contains(f);
                    text.contains(&test) || (nested && all.contains(&test))
                })
                .copied()
                .collect();
            for ty in types {
                let f16s: &[bool] = if !typed || ty == Some(GgmlType::F16) {
                    &[false, true]
                } else {
                    &[false]
                };
                for &f16 in f16s {
                    for (sub, imm) in [(false, false), (true, false), (false, true), (true, true)] {
                        for set in 0..1usize << own.len() {
                            let mut flags = Vec::new();
                            if f16 {
                                flags.push(F16);
                            }
                            if sub {
                                flags.push(SUBGROUPS);
                            }
                            if imm {
                                flags.push(IMMEDIATES);
                            }
                            flags.extend(
                                (0..own.len()).filter(|b| set >> b & 1 == 1).map(|b| own[b]),
                            );
                            let lacks = NEEDS.iter().any(|(f, needs)| {
                                flags.contains(f) && needs.iter().any(|n| !flags.contains(n))
                            });
                            // Q8: the formats with an int8 matvec only.
                            let no_int8 =
                                flags.contains(&"Q8") && !ty.is_some_and(crate::ops::has_int8);
                            // PS: the formats with pair_scaled, never with Q8.
                            let no_ps = flags.contains(&"PS")
                                && (flags.contains(&"Q8")
                                    || !ty.is_some_and(crate::ops::has_pair_scaled));
                            // TL: the matmul's, never with a matvec's flags.
                            let matvec_only = ["P8", "ADD", "NORM", "SGROW", "Q8", "POST", "PS"];
                            let tl_mixed = flags.contains(&"TL")
                                && matvec_only.iter().any(|f| flags.contains(f));
                            if lacks || no_int8 || no_ps || tl_mixed {
                                continue;
                            }
                            let src = module_source(path, ty, &flags).unwrap();
                            if !seen.insert(src.clone()) {
                                continue;
                            }
                            // The matvecs also at the most rows a lane
                            // takes at once (their arrays' full size).
                            let nr: &[&[(&str, f64)]] = if src.contains("override NR") {
                                &[&[], &[("NR", 4.0)]]
                            } else {
                                &[&[]]
                            };
                            for c in nr {
                                if let Err(e) = translate(&src, c) {
                                    failed.push(format!("{path} {ty:?} {flags:?} {c:?}: {e}"));
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(
            failed.is_empty(),
            "{} variants:\n{}",
            failed.len(),
            failed.join("\n")
        );
        eprintln!("{} variants translated to SPIR-V, MSL and HLSL", seen.len());
        // Typed kernels over 13 formats with their flags, and the rest.
        assert!(seen.len() > 150, "only {} variants", seen.len());
    }

    /// The formats `ops::has_int8` names are the ones whose files define
    /// the int8 matvec's functions (under flag Q8), and only with it.
    #[test]
    fn the_int8_formats_are_the_files_with_q8() {
        for info in glint_quant::TYPES {
            let Some(file) = info.wgsl else {
                continue;
            };
            let with = module_source("mul_mat.wgsl", Some(info.ty), &["P8", "Q8"]);
            let without = module_source("mul_mat.wgsl", Some(info.ty), &["P8"]).unwrap();
            let has = source(file).unwrap().contains("#ifdef Q8");
            assert_eq!(crate::ops::has_int8(info.ty), has, "{}", info.name);
            if has {
                let s = with.unwrap();
                assert!(s.contains("fn q8_weights(") && s.contains("fn q8_block("));
                assert!(s.contains("dot4I8Packed") && !without.contains("dot4I8Packed"));
            }
        }
    }

    /// The formats `ops::has_pair_scaled` names are the ones whose files
    /// define `pair_scaled`, and flag PS makes their matvec dot its levels.
    #[test]
    fn the_scaled_formats_are_the_files_with_pair_scaled() {
        let mut n = 0;
        for info in glint_quant::TYPES {
            let Some(file) = info.wgsl else {
                continue;
            };
            let has = source(file).unwrap().contains("fn pair_scaled(");
            assert_eq!(crate::ops::has_pair_scaled(info.ty), has, "{}", info.name);
            if has {
                let with = module_source("mul_mat.wgsl", Some(info.ty), &["P8", "PS"]).unwrap();
                let without = module_source("mul_mat.wgsl", Some(info.ty), &["P8"]).unwrap();
                assert!(with.contains("return pair_scaled(rb, g);"), "{}", info.name);
                assert!(
                    without.contains("return dequant_pair(rb, g);"),
                    "{}",
                    info.name
                );
                n += 1;
            }
        }
        assert_eq!(n, 5, "Q4_0 Q5_0 Q8_0 Q3_K Q6_K");
    }

    #[test]
    fn every_weight_format_has_a_shader_file() {
        let mut n = 0;
        for info in glint_quant::TYPES {
            let Some(file) = info.wgsl else {
                continue;
            };
            assert!(
                source(file).is_some(),
                "{}: no {file} in SOURCES",
                info.name
            );
            for kernel in ["mul_mat.wgsl", "get_rows.wgsl"] {
                let s = module_source(kernel, Some(info.ty), &[]).unwrap();
                assert!(
                    s.contains("fn dequant4(")
                        && s.contains("fn dequant1(")
                        && s.contains("fn dequant_pair(")
                        && s.contains("fn pair_at("),
                    "{}",
                    info.name
                );
            }
            n += 1;
        }
        // Every quant/ file but the eight of shared helpers belongs to a row.
        let files = SOURCES.iter().filter(|(p, _)| p.starts_with("quant/"));
        assert_eq!(files.count(), n + 8);
        assert!(module_source("mul_mat.wgsl", Some(GgmlType::IQ2_XXS), &[]).is_err());
    }
}
