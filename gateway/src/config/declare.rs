//! How a `corral serve` setting is declared. [`declare_settings!`] turns the
//! one table in `settings.rs` into the clap arguments ([`ServeArgs`]), the
//! config file's struct ([`FileConfig`], unknown keys refused), the merge of
//! the two with the default and the check ([`Layers`]), and [`SETTINGS`],
//! the metadata `--help`, the README's flag table and `corral.toml.example`
//! are rendered from or tested against.
//!
//! Why a `macro_rules!` table rather than `figment` or a derive crate: clap
//! and serde are already built, a declarative macro costs no extra crate
//! and no proc-macro build, and each setting stays one readable entry
//! whose clap attributes, TOML key and default are visible in one place.
//!
//! [`ServeArgs`]: super::settings::ServeArgs
//! [`FileConfig`]: super::settings::FileConfig
//! [`Layers`]: super::settings::Layers
//! [`SETTINGS`]: super::settings::SETTINGS

use std::fmt::Display;
use std::path::PathBuf;

use super::ConfigError;

/// One `corral serve` setting, as the docs see it.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The field of `ServeArgs`.
    pub field: &'static str,
    /// `--flag` as typed (`--` for the arguments after it).
    pub flag: &'static str,
    /// The value's placeholder in `--help`, e.g. `DUR`.
    pub value_name: &'static str,
    /// The config file key; `None`: the setting is a flag only.
    pub key: Option<&'static str>,
    /// The environment variable it is also read from, if any.
    pub env: Option<&'static str>,
    /// What applies when no layer sets it.
    pub default: Shown,
    /// The help line, without the default.
    pub help: &'static str,
}

/// A setting's default as people read it.
#[derive(Debug, Clone, Copy)]
pub enum Shown {
    /// No default: start-up refuses a configuration without it.
    Required,
    /// A description, for defaults that are not one value (`none`,
    /// derived from another setting or from the host).
    Text(&'static str),
    /// Rendered from the typed default the merge uses.
    Value(fn() -> String),
}

impl Shown {
    /// The default as `--help`, the README and the example show it.
    pub fn text(&self) -> String {
        match self {
            Shown::Required => "required".into(),
            Shown::Text(text) => (*text).into(),
            Shown::Value(render) => render(),
        }
    }
}

impl Setting {
    /// The help line `--help` prints: the help text and the default.
    pub fn help_line(&self) -> String {
        match self.default {
            Shown::Required => format!("{} (required)", self.help),
            _ => format!("{} [default: {}]", self.help, self.default.text()),
        }
    }
}

/// The clap `long` name of a flag written `--name`; `None` for `--`.
pub fn long_of(flag: &'static str) -> Option<&'static str> {
    flag.strip_prefix("--").filter(|long| !long.is_empty())
}

/// The first layer that sets a scalar: command line, else file.
pub fn pick<V, F: Clone + Into<V>>(cli: &Option<V>, file: &Option<F>) -> Option<V>
where
    V: Clone,
{
    cli.clone().or_else(|| file.clone().map(Into::into))
}

/// A list comes whole from the command line if given there, else the file.
pub fn pick_list<V: Clone>(cli: &[V], file: &Option<Vec<V>>) -> Vec<V> {
    match cli.is_empty() {
        true => file.clone().unwrap_or_default(),
        false => cli.to_vec(),
    }
}

/// The check of a setting any value of its type suits.
pub fn any<T>(_setting: &str, value: T) -> Result<T, ConfigError> {
    Ok(value)
}

/// Renders a number default.
pub fn number<T: Display>(value: T) -> String {
    value.to_string()
}

/// Renders a path default.
pub fn path_text(path: PathBuf) -> String {
    path.display().to_string()
}

/// Renders the default of a clap value enum by its command-line name.
pub fn enum_name<T: clap::ValueEnum>(value: T) -> String {
    value
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_string())
}

/// Declares every `corral serve` setting once. Each entry:
///
/// ```text
/// tables: { key: TYPE, }              (config-file tables with no flag,
///                                     such as `[[token]]`; read by hand)
/// field: CLI_TYPE = "--flag" "VALUE_NAME" [more clap arg attributes],
///     key toml_key: FILE_TYPE,        (optional: flag-only settings omit it)
///     env "VAR",                      (optional: clap reads it)
///     reads VAR,                      (optional: `config::load` reads it)
///     default KIND(..),
///     help "the help line";
/// ```
///
/// `KIND` says how the layers merge and what the default is:
/// `value(TYPE = EXPR, RENDER, CHECK)` (a typed default, rendered for the
/// docs by `RENDER`, checked by `CHECK(label, value)`),
/// `required(TYPE)`, `optional(TYPE, SHOWN)`, `list(TYPE, SHOWN)`, or
/// `custom(SHOWN)` / `custom(required)` for settings `config::load` merges
/// by hand. `SHOWN` is a literal or `{ an expression rendering a value }`.
/// Every kind but `custom` gets a method of that name on `Layers`.
macro_rules! declare_settings {
    (
        after_help: $after_help:expr;
        tables: { $($(#[$table_doc:meta])* $table:ident: $table_ty:ty,)* }
        $(
            $field:ident: $cli:ty = $flag:literal $value_name:literal $([$($arg:tt)*])?,
            $(key $key:ident: $file:ty,)?
            $(env $env:literal,)?
            $(reads $reads:expr,)?
            default $kind:ident($($default:tt)*),
            help $help:literal;
        )*
    ) => {
        /// `corral serve`: every setting optional here, so that the merge
        /// can tell a flag that was given from one that was not.
        #[derive(Debug, Clone, Default, clap::Args)]
        #[command(after_help = $after_help)]
        pub struct ServeArgs {
            $(
                #[arg(
                    long = $crate::config::declare::long_of($flag),
                    value_name = $value_name,
                    $($($arg)*,)?
                    $(env = $env,)?
                    help = help_line(stringify!($field)),
                )]
                pub $field: $cli,
            )*
        }

        /// The config file's settings as written; `Layers` merges them.
        #[derive(Debug, Default, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct FileConfig {
            $($(pub $key: $file,)?)*
            $($(#[$table_doc])* #[serde(default)] pub $table: $table_ty,)*
        }

        /// Every setting, in `--help` order.
        pub const SETTINGS: &[$crate::config::declare::Setting] = &[
            $(
                $crate::config::declare::Setting {
                    field: stringify!($field),
                    flag: $flag,
                    value_name: $value_name,
                    key: declare_settings!(@some $(stringify!($key))?),
                    env: declare_settings!(@some $($env)? $($reads)?),
                    default: declare_settings!(@shown $kind($($default)*)),
                    help: $help,
                },
            )*
        ];

        /// The help line of a declared field (with its default).
        fn help_line(field: &str) -> String {
            SETTINGS
                .iter()
                .find(|setting| setting.field == field)
                .map_or_else(String::new, $crate::config::declare::Setting::help_line)
        }

        /// The command line over the config file, each setting with its
        /// default and check applied.
        pub struct Layers<'a> {
            pub args: &'a ServeArgs,
            pub file: &'a FileConfig,
        }

        /// A `value` setting's merged value, rendered like its default
        /// (tests compare the docs' examples with the defaults).
        #[cfg(test)]
        pub fn shown_value(field: &str, layers: &Layers) -> Option<String> {
            $(declare_settings!(@shown_layer field layers $field $kind($($default)*));)*
            None
        }

        #[allow(dead_code)]
        impl Layers<'_> {
            $(
                declare_settings!(@merge $field $flag $value_name [$($key)?] $kind($($default)*));
            )*
        }
    };

    (@shown_layer $f:ident $l:ident $field:ident
        value($ty:ty = $value:expr, $render:path, $check:expr)) => {
        if $f == stringify!($field) {
            return $l.$field().ok().map($render);
        }
    };
    (@shown_layer $f:ident $l:ident $field:ident $kind:ident($($default:tt)*)) => {};
    (@some $value:expr) => { Some($value) };
    (@some) => { None };
    (@shown value($ty:ty = $value:expr, $render:path, $check:expr)) => {
        $crate::config::declare::Shown::Value(|| $render($value))
    };
    (@shown required($ty:ty)) => { $crate::config::declare::Shown::Required };
    (@shown custom(required)) => { $crate::config::declare::Shown::Required };
    (@shown optional($ty:ty, $($shown:tt)*)) => { declare_settings!(@text $($shown)*) };
    (@shown list($ty:ty, $($shown:tt)*)) => { declare_settings!(@text $($shown)*) };
    (@shown custom($($shown:tt)*)) => { declare_settings!(@text $($shown)*) };
    (@text { $value:expr }) => { $crate::config::declare::Shown::Value(|| $value) };
    (@text $text:literal) => { $crate::config::declare::Shown::Text($text) };

    (@merge $field:ident $flag:literal $value_name:literal [$key:ident]
        value($ty:ty = $value:expr, $render:path, $check:expr)) => {
        pub fn $field(&self) -> Result<$ty, $crate::config::ConfigError> {
            let value = $crate::config::declare::pick(&self.args.$field, &self.file.$key)
                .unwrap_or_else(|| $value);
            ($check)(concat!($flag, " / ", stringify!($key)), value)
        }
    };
    (@merge $field:ident $flag:literal $value_name:literal [$key:ident] required($ty:ty)) => {
        pub fn $field(&self) -> Result<$ty, $crate::config::ConfigError> {
            $crate::config::declare::pick(&self.args.$field, &self.file.$key).ok_or(
                $crate::config::ConfigError::Missing {
                    flag: concat!($flag, " ", $value_name),
                    key: stringify!($key),
                },
            )
        }
    };
    (@merge $field:ident $flag:literal $value_name:literal [$key:ident] optional($ty:ty, $($shown:tt)*)) => {
        pub fn $field(&self) -> Option<$ty> {
            $crate::config::declare::pick(&self.args.$field, &self.file.$key)
        }
    };
    (@merge $field:ident $flag:literal $value_name:literal [$key:ident] list($ty:ty, $($shown:tt)*)) => {
        pub fn $field(&self) -> Vec<$ty> {
            $crate::config::declare::pick_list(&self.args.$field, &self.file.$key)
        }
    };
    (@merge $field:ident $flag:literal $value_name:literal [$($key:ident)?] custom($($shown:tt)*)) => {};
}

pub(super) use declare_settings;
