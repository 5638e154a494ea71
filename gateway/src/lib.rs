//! corral: a gateway that spawns one coding-agent child per project,
//! supervises it, and multiplexes it to many WebSocket clients.

pub mod attach;
pub mod auth;
pub mod config;
pub mod hub;
pub mod projects;
pub mod registry;
pub mod server;
pub mod supervisor;
pub mod ws;
