//! A `type`-tagged enum whose unknown variants are preserved, not rejected.
//!
//! zut RPC v1 only grows: new event types and content blocks may appear, and
//! every known shape may gain fields. [`tagged_enum!`] generates an enum with
//! one variant per known `type` plus `Unknown(Map)`, and serde impls that put
//! `type` first on output and keep unrecognised objects whole on input.

/// Generates the enum, `type_name()`, `Serialize` and `Deserialize`.
macro_rules! tagged_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident($ty:ty) = $tag:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq)]
        pub enum $name {
            $( $(#[$vmeta])* $variant($ty), )*
            /// A `type` this version does not know, kept verbatim.
            Unknown(serde_json::Map<String, serde_json::Value>),
        }

        impl $name {
            /// The wire `type` of this value.
            pub fn type_name(&self) -> &str {
                match self {
                    $( $name::$variant(_) => $tag, )*
                    $name::Unknown(map) => map.get("type").and_then(|t| t.as_str()).unwrap_or(""),
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self {
                    $( $name::$variant(inner) => {
                        $crate::zut::tagged::serialize_tagged($tag, inner, serializer)
                    } )*
                    $name::Unknown(map) => map.serialize(serializer),
                }
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                use serde::de::Error as _;
                let mut map = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
                let tag = match map.get("type") {
                    Some(serde_json::Value::String(tag)) => tag.clone(),
                    Some(_) => return Err(D::Error::custom("`type` must be a string")),
                    None => return Err(D::Error::missing_field("type")),
                };
                match tag.as_str() {
                    $( $tag => {
                        map.remove("type");
                        serde_json::from_value(serde_json::Value::Object(map))
                            .map($name::$variant)
                            .map_err(|e| D::Error::custom(format_args!("{}: {}", $tag, e)))
                    } )*
                    _ => Ok($name::Unknown(map)),
                }
            }
        }
    };
}

pub(crate) use tagged_enum;

/// Serialises `inner` (a struct) as an object with `"type": tag` first.
pub(crate) fn serialize_tagged<T, S>(tag: &str, inner: &T, serializer: S) -> Result<S::Ok, S::Error>
where
    T: serde::Serialize,
    S: serde::Serializer,
{
    use serde::ser::{Error as _, SerializeMap};
    let value = serde_json::to_value(inner).map_err(S::Error::custom)?;
    let serde_json::Value::Object(fields) = value else {
        return Err(S::Error::custom(
            "tagged variant must serialise to an object",
        ));
    };
    let mut map = serializer.serialize_map(Some(fields.len() + 1))?;
    map.serialize_entry("type", tag)?;
    for (key, value) in &fields {
        if key != "type" {
            map.serialize_entry(key, value)?;
        }
    }
    map.end()
}
