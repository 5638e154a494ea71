//! No two modules of `gateway` or `child` import each other, directly or
//! through others: the file-level import graph of each library is acyclic.
//! What counts as an import is documented in `corral_e2e::module_graph`.

use std::path::{Path, PathBuf};

use corral_e2e::module_graph::Graph;

/// `MODULE_GRAPH_ROOT` checks another checkout (e.g. an older commit
/// exported to a directory); by default, this workspace.
fn assert_acyclic(src_dir: &str) {
    let workspace = std::env::var_os("MODULE_GRAPH_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let graph = Graph::of_crate(&workspace, src_dir).expect("the crate's sources are readable");
    assert!(graph.files.len() > 10, "read only {:?}", graph.files);
    let circles = graph.circles();
    let shown: Vec<String> = circles.iter().map(ToString::to_string).collect();
    assert!(
        circles.is_empty(),
        "{} has import circles:\n{}",
        src_dir,
        shown.join("\n")
    );
}

#[test]
fn the_gateway_module_graph_is_acyclic() {
    assert_acyclic("gateway/src");
}

#[test]
fn the_agent_module_graph_is_acyclic() {
    assert_acyclic("child/src");
}
