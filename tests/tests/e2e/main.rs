//! The end-to-end suites, one module each, in one test binary: they run the
//! real `corral` and `corral-agent` binaries (and, where a suite says so,
//! nginx, Chromium, promtool, Node.js clients). One binary links the
//! harness once; `cargo test -p corral-e2e --test e2e <module>::` runs one
//! suite.

mod acp_agent;
mod acp_third_party;
mod agent_prompt;
mod agent_protocol;
mod agent_rpc;
mod agent_run;
mod agent_sandbox;
mod benchmarks;
mod chaos;
mod cli_help;
mod dashboard_browser;
mod deploy_monitoring;
mod deploy_nginx;
mod deploy_service;
mod first_hour;
mod gateway_acp;
mod gateway_admin;
mod gateway_attach;
mod gateway_auth;
mod gateway_broker;
mod gateway_connections;
mod gateway_dialects;
mod gateway_egress;
mod gateway_hardening;
mod gateway_hub;
mod gateway_lifetimes;
mod gateway_limits;
mod gateway_ops;
mod gateway_own_runs;
mod gateway_sandbox;
mod gateway_supervision;
mod journal_faults;
mod journal_lock;
mod letscode_rpc;
mod mock_llm;
mod module_graph;
mod otel_traces;
mod sandbox_exec;
mod zi_conformance;
mod zi_rpc;
mod zut_conformance;
mod zut_permissions;
