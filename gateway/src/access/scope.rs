//! Which projects an identity may open: every project, or those matching
//! a list of names and globs (`team-a-*`). A glob is a project name in
//! which `*` stands for any run of name characters (none included); no
//! other wildcard exists. Pure: no I/O.

use std::fmt;
use std::str::FromStr;

/// The longest pattern accepted (a project name is at most 64 bytes).
const MAX_PATTERN: usize = 64;

/// One project name or glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectPattern(String);

/// A pattern that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("empty project pattern")]
    Empty,
    #[error(
        "project pattern {0:?} is not a project name or glob: use letters, digits, \
         '.', '_', '-' and '*' (any run of those), at most {MAX_PATTERN} characters"
    )]
    Invalid(String),
}

impl FromStr for ProjectPattern {
    type Err = PatternError;

    fn from_str(text: &str) -> Result<Self, PatternError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '*');
        if text.len() > MAX_PATTERN || !text.chars().all(allowed) || text == "." || text == ".." {
            return Err(PatternError::Invalid(text.chars().take(80).collect()));
        }
        Ok(ProjectPattern(text.to_string()))
    }
}

impl fmt::Display for ProjectPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl ProjectPattern {
    /// Whether the project `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        glob(self.0.as_bytes(), name.as_bytes(), false)
    }

    /// Whether every name this pattern matches, `wider` matches too. Sound
    /// (never says yes wrongly), which is what granting needs: it treats
    /// each `*` of this pattern as a symbol only a `*` of `wider` absorbs.
    pub fn within(&self, wider: &ProjectPattern) -> bool {
        glob(wider.0.as_bytes(), self.0.as_bytes(), true)
    }
}

/// Whether `pattern` matches `text`; with `symbolic`, a `*` in `text` is
/// a symbol that only a `*` of `pattern` may cover. Iterative, with the
/// usual single backtrack point: linear in practice, never exponential.
fn glob(pattern: &[u8], text: &[u8], symbolic: bool) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let literal_star = symbolic && text[t] == b'*';
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] && !literal_star {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

/// The projects an identity may open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProjectScope {
    /// Every project (the tokens of the original flags and variables).
    All,
    /// Those matching one of the patterns; an empty list opens nothing.
    Only(Vec<ProjectPattern>),
}

impl ProjectScope {
    /// Whether `project` is in scope. The answer depends on the name
    /// alone, never on whether such a project exists.
    pub fn covers(&self, project: &str) -> bool {
        match self {
            ProjectScope::All => true,
            ProjectScope::Only(patterns) => patterns.iter().any(|p| p.matches(project)),
        }
    }

    /// Whether the scope covers every possible name (`All`, or a bare `*`
    /// among the patterns): what gateway-wide admin actions need.
    pub fn is_everything(&self) -> bool {
        match self {
            ProjectScope::All => true,
            ProjectScope::Only(patterns) => patterns.iter().any(|p| p.0 == "*"),
        }
    }

    /// The patterns as written (`["*"]` for every project).
    pub fn patterns(&self) -> Vec<String> {
        match self {
            ProjectScope::All => vec!["*".to_string()],
            ProjectScope::Only(patterns) => patterns.iter().map(ToString::to_string).collect(),
        }
    }

    /// Whether every project of this scope is in `wider` (an admin may
    /// grant only within its own scope).
    pub fn within(&self, wider: &ProjectScope) -> bool {
        match (self, wider) {
            (_, wider) if wider.is_everything() => true,
            (_, ProjectScope::All) => true,
            (ProjectScope::All, ProjectScope::Only(_)) => false,
            (ProjectScope::Only(mine), ProjectScope::Only(theirs)) => mine
                .iter()
                .all(|p| theirs.iter().any(|wide| p.within(wide))),
        }
    }

    /// Parses a list of patterns (`["team-a-*", "shared"]`).
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<ProjectScope, PatternError> {
        patterns
            .iter()
            .map(|p| p.as_ref().parse())
            .collect::<Result<_, _>>()
            .map(ProjectScope::Only)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> ProjectPattern {
        text.parse().unwrap()
    }

    #[test]
    fn names_and_globs_match_project_names() {
        for (p, name, expected) in [
            ("alpha", "alpha", true),
            ("alpha", "alpha2", false),
            ("team-a-*", "team-a-web", true),
            ("team-a-*", "team-a-", true),
            ("team-a-*", "team-b-web", false),
            ("*", "anything", true),
            ("*-prod", "shop-prod", true),
            ("*-prod", "shop-prod-old", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
        ] {
            assert_eq!(pattern(p).matches(name), expected, "{p} {name}");
        }
        for bad in ["", "a/b", "..", "a b", "team?", &"x".repeat(65)] {
            assert!(bad.parse::<ProjectPattern>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn containment_is_sound() {
        for (narrow, wide, expected) in [
            ("team-a-web", "team-a-*", true),
            ("team-a-*", "team-a-*", true),
            ("team-a-x*", "team-a-*", true),
            ("team-a-*", "team-a-x*", false),
            ("team-*", "team-a-*", false),
            ("a*b", "a*", true),
            ("a*", "*b", false),
            ("*", "alpha", false),
            ("alpha", "*", true),
        ] {
            assert_eq!(
                pattern(narrow).within(&pattern(wide)),
                expected,
                "{narrow} in {wide}"
            );
        }
        let team_a = ProjectScope::parse(&["team-a-*"]).unwrap();
        let web = ProjectScope::parse(&["team-a-web", "team-a-api"]).unwrap();
        let mixed = ProjectScope::parse(&["team-a-web", "team-b-api"]).unwrap();
        assert!(web.within(&team_a));
        assert!(!mixed.within(&team_a));
        assert!(team_a.within(&ProjectScope::All));
        assert!(!ProjectScope::All.within(&team_a));
        assert!(ProjectScope::Only(Vec::new()).within(&team_a));
        assert!(!ProjectScope::Only(Vec::new()).covers("alpha"));
    }

    /// Every string over `alphabet` of at most `max` characters.
    fn strings(alphabet: &[char], max: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..max {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    /// `within` never grants what the wider pattern does not cover: for
    /// every pair of patterns over a small alphabet, checked against every
    /// name up to a length where any counterexample would show (the
    /// patterns' length plus two), and it is not uselessly strict either:
    /// it agrees with the enumeration on most pairs.
    #[test]
    fn containment_agrees_with_enumeration() {
        let patterns: Vec<ProjectPattern> = strings(&['a', 'b', '*'], 4)
            .into_iter()
            .filter_map(|p| p.parse().ok())
            .collect();
        let names = strings(&['a', 'b', 'c'], 6);
        let matched: Vec<Vec<bool>> = patterns
            .iter()
            .map(|p| names.iter().map(|n| p.matches(n)).collect())
            .collect();
        let (mut pairs, mut strict) = (0, 0);
        for (i, narrow) in patterns.iter().enumerate() {
            for (j, wide) in patterns.iter().enumerate() {
                let contained = matched[i].iter().zip(&matched[j]).all(|(n, w)| !n || *w);
                let claimed = narrow.within(wide);
                assert!(
                    !claimed || contained,
                    "{narrow} within {wide} was granted, but a name matches only {narrow}"
                );
                pairs += 1;
                strict += usize::from(contained && !claimed);
            }
        }
        assert!(
            strict * 20 < pairs,
            "{strict} of {pairs} pairs refused needlessly"
        );
    }
}
