//! Paths → files: resolves every path a module names to the file that
//! defines the named item, looking through `use` re-exports and globs.

use super::scan::{CrateTree, RefKind};

/// Re-export chains longer than this are taken to loop.
const MAX_HOPS: usize = 32;

/// What a resolved path names.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// An item (`name`) defined in `module`, which is in `file`.
    Item {
        module: usize,
        file: usize,
        name: String,
    },
    /// A whole module: a dependency only when imported by glob.
    Module(usize),
}

impl CrateTree {
    /// Every edge `(from file, to file, name)` of the crate. Dropped: edges
    /// within one file, and a module's use of its own descendants.
    pub fn edges(&self) -> Vec<(usize, usize, String)> {
        let mut out = Vec::new();
        for (m, module) in self.modules.iter().enumerate() {
            for r in &module.refs {
                let Some(abs) = self.absolute(m, &r.segs, 0) else {
                    continue;
                };
                let (to, name, owner) = match (self.resolve(&abs, 0), r.kind) {
                    (Some(Target::Item { module, file, name }), _) => (file, name, module),
                    (Some(Target::Module(target)), RefKind::Glob) => {
                        (self.modules[target].file, "*".to_string(), target)
                    }
                    _ => continue,
                };
                if to != module.file && !self.is_below(owner, self.file_module(m)) {
                    out.push((module.file, to, name));
                }
            }
        }
        out
    }

    /// `segs` as written in module `m`, made absolute (from the crate root);
    /// `None` for paths into other crates or to names not in scope.
    fn absolute(&self, m: usize, segs: &[String], hops: usize) -> Option<Vec<String>> {
        let first = segs.first()?;
        match first.as_str() {
            "crate" => Some(segs[1..].to_vec()),
            "self" | "super" => {
                let mut at = m;
                let mut rest = segs;
                while let Some(seg) = rest.first() {
                    match seg.as_str() {
                        "super" => at = self.modules[at].parent?,
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
                let mut path = self.path_of(at);
                path.extend_from_slice(rest);
                Some(path)
            }
            name => {
                let module = &self.modules[m];
                if module.children.contains_key(name) || module.defs.contains(name) {
                    let mut path = self.path_of(m);
                    path.extend_from_slice(segs);
                    return Some(path);
                }
                if hops < MAX_HOPS {
                    if let Some(import) = module.imports.get(name) {
                        let mut path = self.absolute(m, import, hops + 1)?;
                        path.extend_from_slice(&segs[1..]);
                        return Some(path);
                    }
                    for glob in &module.globs {
                        let Some(mut path) = self.absolute(m, glob, hops + 1) else {
                            continue;
                        };
                        path.extend_from_slice(segs);
                        if self.resolve(&path, hops + 1).is_some() {
                            return Some(path);
                        }
                    }
                }
                None
            }
        }
    }

    /// Walks an absolute path down the module tree to the defining file.
    fn resolve(&self, path: &[String], hops: usize) -> Option<Target> {
        if hops > MAX_HOPS {
            return None;
        }
        let mut m = 0;
        for (i, seg) in path.iter().enumerate() {
            let module = &self.modules[m];
            if let Some(&child) = module.children.get(seg) {
                m = child;
                continue;
            }
            if module.defs.contains(seg) {
                return Some(Target::Item {
                    module: m,
                    file: module.file,
                    name: seg.clone(),
                });
            }
            if let Some(import) = module.imports.get(seg) {
                let mut target = self.absolute(m, import, hops + 1)?;
                target.extend_from_slice(&path[i + 1..]);
                return self.resolve(&target, hops + 1);
            }
            return module.globs.iter().find_map(|glob| {
                let mut target = self.absolute(m, glob, hops + 1)?;
                target.extend_from_slice(&path[i..]);
                self.resolve(&target, hops + 1)
            });
        }
        Some(Target::Module(m))
    }

    /// The module of the file `m` is written in (`m` itself unless it is an
    /// inline module such as `mod tests { … }`).
    fn file_module(&self, mut m: usize) -> usize {
        while let Some(parent) = self.modules[m].parent {
            if self.modules[parent].file != self.modules[m].file {
                break;
            }
            m = parent;
        }
        m
    }

    /// Whether module `m` is `ancestor` or one of its descendants.
    fn is_below(&self, mut m: usize, ancestor: usize) -> bool {
        loop {
            if m == ancestor {
                return true;
            }
            match self.modules[m].parent {
                Some(parent) => m = parent,
                None => return false,
            }
        }
    }

    /// The absolute path of module `m`.
    fn path_of(&self, mut m: usize) -> Vec<String> {
        let mut names = Vec::new();
        while let Some(parent) = self.modules[m].parent {
            if let Some((name, _)) = self.modules[parent].children.iter().find(|(_, &c)| c == m) {
                names.push(name.clone());
            }
            m = parent;
        }
        names.reverse();
        names
    }
}
