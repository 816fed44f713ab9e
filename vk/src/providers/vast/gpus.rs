//! The VK's neutral GPU types (as pods name them: `RTX4090`, `A100-80GB`) to Vast's exact
//! `gpu_name`s, and which configured types cannot be mapped.
//!
//! Vast's offer search matches `gpu_name` exactly: vast-ai/vast-cli normalises every name on
//! the client side before it searches (`vastai/api/query.py` `parse_query` turns `_` into a
//! space, `gpu_name=RTX_4090` is sent as "RTX 4090"; `vastai/cli/commands/benchmarks.py`
//! `_canonical_gpu_names` maps lower-cased input to the canonical name "for resolving user
//! input like "rtx_4090"/"RTX 4090" to the canonical "RTX 4090""). The canonical names are the
//! constants of `vastai/data/query.py` (`RTX_4090 = "RTX 4090"`, `A100_SXM4 = "A100 SXM4"`,
//! `H100_SXM = "H100 SXM"`, ...): [`VAST_GPU_NAMES`] holds those of the GPUs a VK user is
//! likely to ask for. A Vast name carries no memory size (an "A100 SXM4" offer may have 40 or
//! 80 GB): a sized neutral type adds a `gpu_ram` floor to the search ("GPU RAM in MB. Example:
//! {"gte": 24000}", `api-reference/openapi/yaml/search_offers.yaml`).

use std::collections::BTreeMap;

/// Canonical Vast `gpu_name`s (a subset of vast-cli `vastai/data/query.py`).
pub const VAST_GPU_NAMES: &[&str] = &[
    "A10",
    "A10g",
    "A16",
    "A30",
    "A40",
    "A100 PCIE",
    "A100 SXM4",
    "A100 SXM",
    "A100X",
    "A800 PCIE",
    "B200",
    "GH200 SXM",
    "H100 PCIE",
    "H100 SXM",
    "H100 NVL",
    "H200",
    "H200 NVL",
    "L4",
    "L40",
    "L40S",
    "Tesla T4",
    "Tesla V100",
    "Tesla P100",
    "RTX 3060",
    "RTX 3070",
    "RTX 3080",
    "RTX 3080 Ti",
    "RTX 3090",
    "RTX 3090 Ti",
    "RTX 4060 Ti",
    "RTX 4070",
    "RTX 4070 Ti",
    "RTX 4080",
    "RTX 4080S",
    "RTX 4090",
    "RTX 4090D",
    "RTX 5070",
    "RTX 5070 Ti",
    "RTX 5080",
    "RTX 5090",
    "RTX A4000",
    "RTX A4500",
    "RTX A5000",
    "RTX A6000",
    "RTX 4000Ada",
    "RTX 5000Ada",
    "RTX 6000Ada",
    "RTX PRO 6000",
];

const A100: &[&str] = &["A100 SXM4", "A100 PCIE", "A100 SXM", "A100X"];
const H100: &[&str] = &["H100 SXM", "H100 PCIE", "H100 NVL"];

/// Built-in mapping: neutral type, Vast names, smallest `gpu_ram` (MB) when the type is sized.
/// An 80 GB card reports about 80,000-81,920 MB and a 40 GB one about 40,000-40,960, so a
/// floor a little below the nominal size tells them apart.
const BUILT_IN: &[(&str, &[&str], Option<u32>)] = &[
    ("RTX3090", &["RTX 3090"], None),
    ("RTX4080", &["RTX 4080"], None),
    ("RTX4090", &["RTX 4090"], None),
    ("RTX5080", &["RTX 5080"], None),
    ("RTX5090", &["RTX 5090"], None),
    ("RTXA4000", &["RTX A4000"], None),
    ("RTXA5000", &["RTX A5000"], None),
    ("RTXA6000", &["RTX A6000"], None),
    ("RTX6000ADA", &["RTX 6000Ada"], None),
    ("RTXPRO6000", &["RTX PRO 6000"], None),
    ("A10", &["A10"], None),
    ("A40", &["A40"], None),
    ("L4", &["L4"], None),
    ("L40", &["L40"], None),
    ("L40S", &["L40S"], None),
    ("T4", &["Tesla T4"], None),
    ("V100", &["Tesla V100"], None),
    ("A100", A100, None),
    ("A100-40GB", A100, Some(38_000)),
    ("A100-80GB", A100, Some(76_000)),
    ("H100", H100, None),
    ("H100-80GB", H100, Some(76_000)),
    ("H100-SXM", &["H100 SXM"], None),
    ("H100-PCIE", &["H100 PCIE"], None),
    ("H100-NVL", &["H100 NVL"], None),
    ("H200", &["H200", "H200 NVL"], None),
    ("B200", &["B200"], None),
    ("GH200", &["GH200 SXM"], None),
];

/// What the search asks for one neutral type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuMatch {
    /// Exact Vast `gpu_name`s, any of which will do.
    pub names: Vec<String>,
    /// Smallest `gpu_ram` per GPU, MB.
    pub min_gpu_ram_mb: Option<u32>,
    /// How the names were found.
    pub source: Source,
}

/// Where a [`GpuMatch`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The operator's `gpuNames`.
    Configured,
    /// The built-in table.
    BuiltIn,
    /// Neither: the type is searched as written (right only if it is a Vast name already).
    Verbatim,
}

/// The Vast names for `neutral`: the operator's `gpuNames` first (exact key), then the
/// built-in table (neutral types compare case-insensitively, as dispatch compares them),
/// else the type as written.
pub fn resolve(configured: &BTreeMap<String, String>, neutral: &str) -> GpuMatch {
    if let Some(name) = configured.get(neutral) {
        return GpuMatch {
            names: vec![name.clone()],
            min_gpu_ram_mb: None,
            source: Source::Configured,
        };
    }
    if let Some((_, names, ram)) = BUILT_IN
        .iter()
        .find(|(n, _, _)| n.eq_ignore_ascii_case(neutral))
    {
        return GpuMatch {
            names: names.iter().map(|s| (*s).to_owned()).collect(),
            min_gpu_ram_mb: *ram,
            source: Source::BuiltIn,
        };
    }
    GpuMatch {
        names: vec![neutral.to_owned()],
        min_gpu_ram_mb: None,
        source: Source::Verbatim,
    }
}

/// The Vast names of a built-in neutral type (`None` when the table has no entry).
pub fn built_in_names(neutral: &str) -> Option<&'static [&'static str]> {
    BUILT_IN
        .iter()
        .find(|(n, _, _)| n.eq_ignore_ascii_case(neutral))
        .map(|(_, names, _)| *names)
}

/// The neutral type the built-in table names a Vast `gpu_name` by (its unsized entry: "A100
/// SXM4" is `A100`, whatever the memory), for inventories read from offers.
pub fn built_in_neutral(vast_name: &str) -> Option<&'static str> {
    BUILT_IN
        .iter()
        .find(|(_, names, ram)| ram.is_none() && names.contains(&vast_name))
        .map(|(n, _, _)| *n)
}

/// True when `name` is one of the canonical Vast names this build knows.
pub fn is_vast_name(name: &str) -> bool {
    VAST_GPU_NAMES.contains(&name)
}

/// Warnings about the GPU types a Vast provider's settings name (`defaultGpuType`, the keys
/// and values of `gpuNames`) that cannot be mapped to an exact Vast `gpu_name`; each names the
/// provider and the type. Such a type finds no offer on the real service.
pub fn unmapped_warnings(
    provider: &str,
    configured: &BTreeMap<String, String>,
    default_gpu_type: Option<&str>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (neutral, name) in configured {
        if !is_vast_name(name) {
            out.push(format!(
                "provider {provider}: gpuNames maps GPU type {neutral} to {name:?}, which is not \
                 a Vast gpu_name this build knows (Vast matches names exactly, e.g. \"RTX 4090\"); \
                 check the spelling"
            ));
        }
    }
    if let Some(t) = default_gpu_type {
        let m = resolve(configured, t);
        if m.source == Source::Verbatim && !is_vast_name(t) {
            out.push(format!(
                "provider {provider}: defaultGpuType {t} has no Vast gpu_name: it is neither in \
                 gpuNames nor a built-in type, and Vast matches names exactly (e.g. \"RTX \
                 4090\"); add it to gpuNames"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neutral_types_map_to_exact_vast_names() {
        let none = BTreeMap::new();
        let m = resolve(&none, "RTX4090");
        assert_eq!(
            (m.names, m.source),
            (vec!["RTX 4090".into()], Source::BuiltIn)
        );
        let m = resolve(&none, "a100-80gb");
        assert!(m.names.contains(&"A100 SXM4".to_owned()));
        assert_eq!(m.min_gpu_ram_mb, Some(76_000));
        // Every built-in name is a canonical one.
        for (_, names, _) in BUILT_IN {
            assert!(names.iter().all(|n| is_vast_name(n)), "{names:?}");
        }
        // The operator's mapping wins; unknown types are searched as written.
        let cfg: BTreeMap<String, String> = [("RTX4090".into(), "RTX 4090D".into())].into();
        assert_eq!(resolve(&cfg, "RTX4090").names, ["RTX 4090D"]);
        assert_eq!(built_in_neutral("RTX 4090"), Some("RTX4090"));
        assert_eq!(built_in_neutral("A100 SXM4"), Some("A100"));
        assert_eq!(built_in_neutral("RTX4090"), None);
        let m = resolve(&none, "RTX4090X");
        assert_eq!(
            (m.names, m.source),
            (vec!["RTX4090X".into()], Source::Verbatim)
        );
    }

    #[test]
    fn unmapped_types_are_warned_about_by_provider_and_type() {
        let none = BTreeMap::new();
        assert!(unmapped_warnings("vast", &none, Some("RTX4090")).is_empty());
        assert!(unmapped_warnings("vast", &none, Some("RTX 4090")).is_empty());
        assert!(unmapped_warnings("vast", &none, None).is_empty());
        let w = unmapped_warnings("vast-eu", &none, Some("RTX4090X"));
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("vast-eu") && w[0].contains("RTX4090X"),
            "{w:?}"
        );
        let cfg: BTreeMap<String, String> = [
            ("A6000".into(), "RTX A6000".into()),
            ("RTX4090".into(), "RTX_4090".into()),
        ]
        .into();
        let w = unmapped_warnings("vast", &cfg, Some("A6000"));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("RTX4090") && w[0].contains("\"RTX_4090\""),
            "{w:?}"
        );
    }
}
