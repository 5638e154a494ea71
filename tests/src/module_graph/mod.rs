//! The file-level import graph of a crate, and the circles in it: what the
//! `module_graph` suite checks so that no two modules of `gateway` or
//! `child` import each other, directly or through others.
//!
//! Read from the source text, without compiling. What counts as an edge
//! `A → B` ("file A imports file B"):
//! - A names an item defined in B: in a `use` (`use crate::x::Y`,
//!   `use super::Y`) or as a path in code (`crate::x::f()`, `super::Y`,
//!   `imported_module::Z`). A child using `super::X` where X is defined in
//!   the parent's file is an edge child → parent.
//! - Re-exports are looked through: if A names `m::Y` and `m` only
//!   re-exports Y from B (`pub use b::Y`), the edge is A → B.
//! - A module's use of its own descendants is no edge: it owns them, and
//!   declaring (`mod x;`), re-exporting (`pub use x::Y`) or calling into
//!   them (`x::f()`) all say the same. A descendant's use of an ancestor's
//!   item is an edge, so a circle through a parent shows as the child →
//!   parent edge plus the parent's edges to others.
//! - `use a::b::*` is an edge to `b`'s file.
//! - Importing a module by name (`use crate::hub;`) is no edge by itself:
//!   only the items used through it are.
//! - Test modules count like any other code (inline `mod tests` and
//!   `#[path = "x_tests.rs"]` files): a circle through a test is a circle.
//! - Only the library (`lib.rs` and below) is read: a binary's `main.rs` is
//!   another crate, which the library cannot import.
//!
//! Known blind spot: a name brought in by a glob and then used bare (not as
//! the head of a path) is not seen; the glob's own edge covers its module.

mod lexer;
mod resolve;
mod scan;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use scan::CrateTree;

/// Files (relative paths) and the names each edge carries.
#[derive(Debug, Default)]
pub struct Graph {
    pub files: Vec<String>,
    pub edges: BTreeMap<(usize, usize), BTreeSet<String>>,
}

/// One circle: the files of a strongly connected component, and one loop
/// through them that shows it.
#[derive(Debug)]
pub struct Circle {
    pub files: Vec<String>,
    /// `(from, to, names)` along one loop, ending where it began.
    pub path: Vec<(String, String, Vec<String>)>,
}

impl Graph {
    /// Reads the crate rooted at `base/src_dir/lib.rs`.
    pub fn of_crate(base: &Path, src_dir: &str) -> std::io::Result<Graph> {
        let tree = CrateTree::read(base, Path::new(src_dir))?;
        let mut graph = Graph {
            files: tree.files.iter().map(|f| f.display().to_string()).collect(),
            ..Graph::default()
        };
        for (from, to, name) in tree.edges() {
            graph.edges.entry((from, to)).or_default().insert(name);
        }
        Ok(graph)
    }

    /// Every circle (strongly connected component of two or more files).
    pub fn circles(&self) -> Vec<Circle> {
        let n = self.files.len();
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
        for &(from, to) in self.edges.keys() {
            next[from].push(to);
        }
        strongly_connected(&next)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|component| self.circle(&next, &component))
            .collect()
    }

    fn circle(&self, next: &[Vec<usize>], component: &[usize]) -> Circle {
        let inside: BTreeSet<usize> = component.iter().copied().collect();
        let start = *component
            .iter()
            .min_by_key(|&&f| &self.files[f])
            .unwrap_or(&component[0]);
        // Breadth-first from `start` back to `start`, inside the component.
        let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut end = None;
        while let Some(f) = queue.pop_front() {
            for &t in &next[f] {
                if t == start {
                    end = Some(f);
                    break;
                }
                if inside.contains(&t) && !came_from.contains_key(&t) {
                    came_from.insert(t, f);
                    queue.push_back(t);
                }
            }
            if end.is_some() {
                break;
            }
        }
        let mut loop_files = vec![start];
        let mut at = end.unwrap_or(start);
        while at != start {
            loop_files.push(at);
            at = came_from[&at];
        }
        loop_files[1..].reverse();
        loop_files.push(start);
        let path = loop_files
            .windows(2)
            .map(|w| {
                let names = self
                    .edges
                    .get(&(w[0], w[1]))
                    .map(|s| s.iter().cloned().collect())
                    .unwrap_or_default();
                (self.files[w[0]].clone(), self.files[w[1]].clone(), names)
            })
            .collect();
        let mut files: Vec<String> = component.iter().map(|&f| self.files[f].clone()).collect();
        files.sort();
        Circle { files, path }
    }
}

impl fmt::Display for Circle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "circle of {} files: {}",
            self.files.len(),
            self.files.join(", ")
        )?;
        for (from, to, names) in &self.path {
            writeln!(f, "  {from} -> {to}: {}", names.join(", "))?;
        }
        Ok(())
    }
}

/// Tarjan's algorithm, iterative; components in no particular order.
fn strongly_connected(next: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = next.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut components = Vec::new();
    let mut counter = 0;
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut edge)) = work.last_mut() {
            if *edge == 0 && index[v] == usize::MAX {
                index[v] = counter;
                low[v] = counter;
                counter += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = next[v].get(*edge) {
                *edge += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                components.push(component);
            }
        }
    }
    components
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `files` under a fresh `src/` and returns its graph's circles.
    fn circles_of(files: &[(&str, &str)]) -> Vec<Circle> {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join("src").join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        Graph::of_crate(dir.path(), "src").unwrap().circles()
    }

    #[test]
    fn two_files_that_import_each_other_are_a_circle_with_its_names() {
        let circles = circles_of(&[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            ("b.rs", "pub struct B;\npub fn f() { crate::a::A; }\n"),
        ]);
        assert_eq!(circles.len(), 1, "{circles:?}");
        assert_eq!(circles[0].files, ["src/a.rs", "src/b.rs"]);
        let shown = circles[0].to_string();
        assert!(shown.contains("src/a.rs -> src/b.rs: B"), "{shown}");
        assert!(shown.contains("src/b.rs -> src/a.rs: A"), "{shown}");
    }

    #[test]
    fn a_parent_declaring_re_exporting_and_calling_its_children_is_no_circle() {
        let circles = circles_of(&[
            ("lib.rs", "pub mod hub;\n"),
            ("hub/mod.rs", "mod actor;\nmod asks;\npub use actor::Hub;\npub struct Config;\nfn f() { actor::run(); }\n"),
            ("hub/actor.rs", "use super::Config;\nuse super::asks::Asks;\npub struct Hub;\npub fn run() {}\n"),
            // Names Hub through the parent's re-export: the edge is asks → actor.
            ("hub/asks.rs", "pub struct Asks;\n"),
        ]);
        assert!(circles.is_empty(), "{circles:?}");
    }

    #[test]
    fn a_loop_through_a_re_export_is_found_at_the_defining_file() {
        let circles = circles_of(&[
            ("lib.rs", "pub mod hub;\n"),
            ("hub/mod.rs", "mod actor;\nmod asks;\npub use actor::Hub;\n"),
            ("hub/actor.rs", "use super::asks::Asks;\npub struct Hub;\n"),
            ("hub/asks.rs", "pub struct Asks;\nfn f(_: &super::Hub) {}\n"),
        ]);
        assert_eq!(circles.len(), 1, "{circles:?}");
        assert_eq!(circles[0].files, ["src/hub/actor.rs", "src/hub/asks.rs"]);
    }

    #[test]
    fn module_imports_comments_and_strings_are_no_edges() {
        let circles = circles_of(&[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            ("a.rs", "use crate::b;\npub struct A;\nfn f() { b::g(); }\n"),
            (
                "b.rs",
                "// use crate::a::A;\nconst S: &str = \"crate::a::A\";\npub fn g() {}\n",
            ),
        ]);
        assert!(circles.is_empty(), "{circles:?}");
    }

    #[test]
    fn inline_test_modules_and_globs_count_for_their_file() {
        let circles = circles_of(&[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            (
                "a.rs",
                "pub struct A;\n#[cfg(test)]\nmod tests {\n    use crate::b::*;\n}\n",
            ),
            ("b.rs", "pub fn g() -> crate::a::A { crate::a::A }\n"),
        ]);
        assert_eq!(circles.len(), 1, "{circles:?}");
        assert_eq!(circles[0].files, ["src/a.rs", "src/b.rs"]);
    }

    #[test]
    fn a_test_file_by_path_is_its_own_file_under_its_parent() {
        let circles = circles_of(&[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            (
                "a.rs",
                "pub struct A;\n#[cfg(test)]\n#[path = \"a_tests.rs\"]\nmod tests;\n",
            ),
            (
                "a_tests.rs",
                "use super::A;\nuse crate::b::g;\npub fn t() {}\n",
            ),
            (
                "b.rs",
                "pub fn g() {}\npub fn h() { crate::a::tests::t(); }\n",
            ),
        ]);
        // a_tests → b (g), b → a_tests (t); a → a_tests is a declaration only.
        assert_eq!(circles.len(), 1, "{circles:?}");
        assert_eq!(circles[0].files, ["src/a_tests.rs", "src/b.rs"]);
    }
}
