//! Programs outside the Rust toolchain that some suites drive, and the
//! message a test fails with when one is missing: which Debian package to
//! install, and the command that installs all of them (`.ci/install-deps`).

use std::path::PathBuf;

/// An outside program a suite needs.
#[derive(Debug, Clone, Copy)]
pub struct Prerequisite {
    /// The program's name on `PATH`.
    pub program: &'static str,
    /// Where it is looked for besides `PATH` (e.g. `/usr/sbin` for nginx,
    /// which is not on an ordinary user's `PATH`).
    pub also_in: &'static [&'static str],
    /// The Debian/Ubuntu packages that provide it.
    pub packages: &'static str,
    /// The suites that need it.
    pub used_by: &'static str,
}

pub const NGINX: Prerequisite = Prerequisite {
    program: "nginx",
    also_in: &["/usr/sbin"],
    packages: "nginx",
    used_by: "tests/tests/e2e/deploy_nginx.rs",
};

pub const PROMTOOL: Prerequisite = Prerequisite {
    program: "promtool",
    also_in: &[],
    packages: "prometheus",
    used_by: "tests/tests/e2e/deploy_monitoring.rs and gateway_admin.rs",
};

pub const CHROMIUM: Prerequisite = Prerequisite {
    program: "chromium",
    also_in: &["/usr/bin"],
    packages: "chromium fonts-dejavu-core",
    used_by: "tests/tests/e2e/dashboard_browser.rs",
};

pub const PYTHON3: Prerequisite = Prerequisite {
    program: "python3",
    also_in: &["/usr/bin"],
    packages: "python3",
    used_by: "the sandbox and limits suites (as a tool command)",
};

pub const CURL: Prerequisite = Prerequisite {
    program: "curl",
    also_in: &["/usr/bin"],
    packages: "curl",
    used_by: "tests/tests/e2e/gateway_egress.rs (a tool fetching through the egress proxy)",
};

pub const OPENSSL: Prerequisite = Prerequisite {
    program: "openssl",
    also_in: &["/usr/bin"],
    packages: "openssl",
    used_by: "tests/tests/e2e/gateway_egress.rs (a test registry's TLS certificate)",
};

pub const SCRIPT: Prerequisite = Prerequisite {
    program: "script",
    also_in: &["/usr/bin"],
    packages: "bsdutils",
    used_by: "the sandbox suites (a tool that needs a terminal)",
};

pub const NODE: Prerequisite = Prerequisite {
    program: "node",
    also_in: &["/usr/bin"],
    packages: "nodejs npm",
    used_by:
        "tests/tests/e2e/acp_agent.rs and acp_third_party.rs (Node 20+: the ACP SDK client, pi-acp)",
};

pub const NPM: Prerequisite = Prerequisite {
    program: "npm",
    also_in: &["/usr/bin"],
    packages: "npm",
    used_by:
        "tests/tests/e2e/acp_third_party.rs (npm ci of tests/acp_client and tests/acp_third_party)",
};

impl Prerequisite {
    /// The program's path, if it is installed.
    pub fn find(&self) -> Option<PathBuf> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain(self.also_in.iter().map(PathBuf::from))
            .map(|dir| dir.join(self.program))
            .find(|bin| bin.is_file())
    }

    /// What to tell someone who does not have it.
    pub fn missing_message(&self) -> String {
        format!(
            "{program} is not installed; it is needed by {used_by}. Install every test \
             prerequisite with `.ci/install-deps` (as root, or it uses sudo), or just this one \
             with `sudo apt-get install -y --no-install-recommends {packages}` \
             (Debian/Ubuntu package: {packages}).",
            program = self.program,
            used_by = self.used_by,
            packages = self.packages,
        )
    }

    /// The program's path; panics with [`Prerequisite::missing_message`]
    /// when it is not installed.
    pub fn require(&self) -> PathBuf {
        self.find()
            .unwrap_or_else(|| panic!("{}", self.missing_message()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_package_and_the_command() {
        let message = PROMTOOL.missing_message();
        assert!(message.contains("apt-get install -y --no-install-recommends prometheus"));
        assert!(message.contains(".ci/install-deps"));
        let missing = Prerequisite {
            program: "corral-no-such-program",
            also_in: &[],
            packages: "none",
            used_by: "nothing",
        };
        assert_eq!(missing.find(), None);
        let panic = std::panic::catch_unwind(|| missing.require()).unwrap_err();
        let text = panic.downcast_ref::<String>().unwrap();
        assert!(
            text.contains("corral-no-such-program is not installed"),
            "{text}"
        );
    }
}
