//! Reads one crate's module tree from its files (from `lib.rs` through every
//! `mod x;`, `#[path]` included) and records, per module, what it defines,
//! what it imports and which paths its code names. Resolution of those paths
//! to files is in [`super::resolve`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::lexer::{tokens, Token};

/// Keywords that introduce a named item.
const ITEM_KEYWORDS: [&str; 8] = [
    "fn", "struct", "enum", "trait", "type", "const", "static", "union",
];

/// Words that may follow an item keyword without being the item's name.
const NOT_A_NAME: [&str; 5] = ["fn", "_", "mut", "unsafe", "extern"];

/// How a path was written, which decides what it means as an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefKind {
    /// A leaf of a `use` tree (`use a::b::C;`).
    Use,
    /// A glob (`use a::b::*;`): a dependency on the whole module `a::b`.
    Glob,
    /// A path in code (`crate::a::f()`, `super::X`, `imported::Y`).
    Code,
}

/// A path as written in one module, before resolution.
#[derive(Debug, Clone)]
pub struct Ref {
    pub segs: Vec<String>,
    pub kind: RefKind,
}

/// One module: a file, or an inline `mod x { … }` inside a file.
#[derive(Debug, Default)]
pub struct Module {
    pub file: usize,
    pub parent: Option<usize>,
    pub children: BTreeMap<String, usize>,
    /// Names of items defined at this module's top level.
    pub defs: BTreeSet<String>,
    /// `use` bindings: local name → path as written (relative to this module).
    pub imports: BTreeMap<String, Vec<String>>,
    /// `use …::*` targets, as written.
    pub globs: Vec<Vec<String>>,
    pub refs: Vec<Ref>,
}

/// One crate's modules and files. Module 0 is the crate root.
#[derive(Debug, Default)]
pub struct CrateTree {
    /// What file names are relative to.
    base: PathBuf,
    pub modules: Vec<Module>,
    /// Files, relative to the directory handed to [`CrateTree::read`].
    pub files: Vec<PathBuf>,
}

impl CrateTree {
    /// Reads the crate whose root file is `base/src_root/lib.rs`; file names
    /// are reported relative to `base`.
    pub fn read(base: &Path, src_root: &Path) -> std::io::Result<CrateTree> {
        let mut tree = CrateTree {
            base: base.to_path_buf(),
            ..CrateTree::default()
        };
        let root_file = src_root.join("lib.rs");
        tree.modules.push(Module::default());
        tree.files.push(root_file.clone());
        let mut queue = vec![(0usize, src_root.to_path_buf())];
        while let Some((module, child_dir)) = queue.pop() {
            let file = tree.modules[module].file;
            let src = std::fs::read_to_string(base.join(&tree.files[file]))?;
            tree.parse_file(module, &child_dir, &tokens(&src), &mut queue);
        }
        Ok(tree)
    }

    /// Reads one file's tokens into `module` (and the inline modules it
    /// holds); queues the files of the modules it declares.
    fn parse_file(
        &mut self,
        module: usize,
        child_dir: &Path,
        toks: &[Token],
        queue: &mut Vec<(usize, PathBuf)>,
    ) {
        let file = self.modules[module].file;
        let file_dir = self.files[file]
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        // Brace frames: `Some((module, dir))` for an inline module's body.
        let mut frames: Vec<Option<(usize, PathBuf)>> = Vec::new();
        let mut pending_inline: Option<(usize, PathBuf)> = None;
        let mut pending_path: Option<String> = None;
        let mut i = 0;
        while i < toks.len() {
            let (current, dir) = frames
                .iter()
                .rev()
                .find_map(|f| f.clone())
                .unwrap_or((module, child_dir.to_path_buf()));
            let at_module_level = frames.last().is_none_or(Option::is_some);
            match &toks[i] {
                Token::Punct('{') => {
                    frames.push(pending_inline.take());
                    i += 1;
                }
                Token::Punct('}') => {
                    frames.pop();
                    i += 1;
                }
                Token::Punct('#') if matches!(toks.get(i + 2), Some(Token::Ident(p)) if p == "path") =>
                {
                    if let Some(Token::Str(p)) = toks.get(i + 4) {
                        pending_path = Some(p.clone());
                    }
                    i += 1;
                }
                Token::Ident(kw) if kw == "mod" => {
                    let Some(Token::Ident(name)) = toks.get(i + 1) else {
                        i += 1;
                        continue;
                    };
                    let child = self.new_module(current, name, file);
                    match toks.get(i + 2) {
                        Some(Token::Punct('{')) => pending_inline = Some((child, dir.join(name))),
                        _ => {
                            let (path, sub_dir) = match pending_path.take() {
                                Some(p) => {
                                    let path = file_dir.join(p);
                                    let sub = path.with_extension("");
                                    (path, sub)
                                }
                                None => module_file(&self.base, &dir, name),
                            };
                            let idx = self.files.len();
                            self.files.push(path);
                            self.modules[child].file = idx;
                            queue.push((child, sub_dir));
                        }
                    }
                    i += 2;
                }
                Token::Ident(kw) if kw == "use" => {
                    i += 1;
                    let mut leaves = Vec::new();
                    parse_use_tree(toks, &mut i, Vec::new(), &mut leaves);
                    let m = &mut self.modules[current];
                    for (segs, binding) in leaves {
                        match binding {
                            Binding::Name(name) => {
                                m.imports.insert(name, segs.clone());
                                m.refs.push(Ref {
                                    segs,
                                    kind: RefKind::Use,
                                });
                            }
                            Binding::Hidden => m.refs.push(Ref {
                                segs,
                                kind: RefKind::Use,
                            }),
                            Binding::Glob => {
                                m.globs.push(segs.clone());
                                m.refs.push(Ref {
                                    segs,
                                    kind: RefKind::Glob,
                                });
                            }
                        }
                    }
                }
                Token::Ident(kw) if kw == "macro_rules" && at_module_level => {
                    if let Some(Token::Ident(name)) = toks.get(i + 2) {
                        self.modules[current].defs.insert(name.clone());
                    }
                    i += 3;
                }
                Token::Ident(kw) if at_module_level && ITEM_KEYWORDS.contains(&kw.as_str()) => {
                    if let Some(Token::Ident(name)) = toks.get(i + 1) {
                        if !NOT_A_NAME.contains(&name.as_str()) {
                            self.modules[current].defs.insert(name.clone());
                        }
                    }
                    i += 1;
                }
                Token::Ident(_)
                    if matches!(toks.get(i + 1), Some(Token::PathSep))
                        && !matches!(i.checked_sub(1).map(|p| &toks[p]), Some(Token::PathSep)) =>
                {
                    let mut segs = Vec::new();
                    while let Some(Token::Ident(seg)) = toks.get(i) {
                        segs.push(seg.clone());
                        i += 1;
                        if matches!(toks.get(i), Some(Token::PathSep)) {
                            i += 1;
                        } else {
                            break;
                        }
                    }
                    self.modules[current].refs.push(Ref {
                        segs,
                        kind: RefKind::Code,
                    });
                }
                _ => i += 1,
            }
        }
    }

    fn new_module(&mut self, parent: usize, name: &str, file: usize) -> usize {
        let idx = self.modules.len();
        self.modules.push(Module {
            file,
            parent: Some(parent),
            ..Module::default()
        });
        self.modules[parent].children.insert(name.to_string(), idx);
        idx
    }
}

/// `name.rs` (children under `name/`) or `name/mod.rs`.
fn module_file(base: &Path, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let flat = dir.join(format!("{name}.rs"));
    let sub_dir = dir.join(name);
    if base.join(&flat).exists() || !base.join(&sub_dir).join("mod.rs").exists() {
        (flat, sub_dir)
    } else {
        (sub_dir.join("mod.rs"), sub_dir)
    }
}

/// What a `use` leaf binds.
#[derive(Debug, PartialEq, Eq)]
enum Binding {
    Name(String),
    /// `as _`: used for its traits only, binds no name.
    Hidden,
    Glob,
}

/// Parses one use tree at `toks[*i]` (after `use` or inside `{…}`), leaving
/// `*i` after it (and after the closing `;` at the top level).
fn parse_use_tree(
    toks: &[Token],
    i: &mut usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Binding)>,
) {
    loop {
        match toks.get(*i) {
            Some(Token::PathSep) => *i += 1,
            Some(Token::Punct('{')) => {
                *i += 1;
                loop {
                    match toks.get(*i) {
                        Some(Token::Punct('}')) | None => {
                            *i += 1;
                            break;
                        }
                        Some(Token::Punct(',')) => *i += 1,
                        _ => parse_use_tree(toks, i, prefix.clone(), out),
                    }
                }
                break;
            }
            Some(Token::Punct('*')) => {
                *i += 1;
                out.push((prefix, Binding::Glob));
                break;
            }
            Some(Token::Ident(seg)) => {
                *i += 1;
                if matches!(toks.get(*i), Some(Token::PathSep)) {
                    prefix.push(seg.clone());
                    continue;
                }
                let local = if seg == "self" {
                    prefix.last().cloned().unwrap_or_default()
                } else {
                    prefix.push(seg.clone());
                    seg.clone()
                };
                let binding = match (toks.get(*i), toks.get(*i + 1)) {
                    (Some(Token::Ident(kw)), Some(Token::Ident(alias))) if kw == "as" => {
                        *i += 2;
                        if alias == "_" {
                            Binding::Hidden
                        } else {
                            Binding::Name(alias.clone())
                        }
                    }
                    _ => Binding::Name(local),
                };
                out.push((prefix, binding));
                break;
            }
            _ => break,
        }
    }
    if matches!(toks.get(*i), Some(Token::Punct(';'))) {
        *i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(src: &str) -> Vec<(Vec<String>, Binding)> {
        let toks = tokens(src);
        let mut i = 1;
        let mut out = Vec::new();
        parse_use_tree(&toks, &mut i, Vec::new(), &mut out);
        out
    }

    fn p(s: &str) -> Vec<String> {
        s.split("::").map(String::from).collect()
    }

    #[test]
    fn use_trees_expand_to_leaves_with_their_bindings() {
        let got = leaves("use crate::a::{self, b::{C, D as E}, f::*, G as _};");
        assert_eq!(
            got,
            vec![
                (p("crate::a"), Binding::Name("a".into())),
                (p("crate::a::b::C"), Binding::Name("C".into())),
                (p("crate::a::b::D"), Binding::Name("E".into())),
                (p("crate::a::f"), Binding::Glob),
                (p("crate::a::G"), Binding::Hidden),
            ]
        );
    }
}
