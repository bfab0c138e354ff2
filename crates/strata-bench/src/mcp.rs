//! The mcp group: one `run` tool call of `true`, end to end through stdio,
//! as an MCP client sees it: JSON-RPC over the pipes of a child `strata
//! mcp` server (this binary re-executed as `__mcp-stdio STORE`, serving
//! strata-mcp exactly as `strata mcp` does), the tool, the exec in the
//! Sandbox and the result back. The client is rmcp's. Beside it, `status`
//! (one request to the daemon, no command) and the SDK's exec of `true` in
//! the same Sandbox, so the protocol's share can be read off. Needs root
//! like the sandbox group.

use crate::report::{median, ms, Row};
use crate::Ctx;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use std::time::Instant;

/// The hidden argument this binary serves MCP on stdio under.
pub const MCP_ARG: &str = "__mcp-stdio";

/// `strata-bench __mcp-stdio STORE`: serve the Store as `strata mcp` does.
pub fn maybe_serve() {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some(MCP_ARG) {
        return;
    }
    let store = args.next().expect("__mcp-stdio STORE");
    let code = match tokio::runtime::Runtime::new()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let client = strata_sdk::Client::local(&store)
                    .await
                    .map_err(|e| e.to_string())?;
                let backend = strata_mcp::Backend::new(client, Default::default());
                strata_mcp::serve_stdio(backend)
                    .await
                    .map_err(|e| e.to_string())
            })
        }) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("strata-bench mcp server: {e}");
            1
        }
    };
    std::process::exit(code);
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(run_async(ctx))
}

async fn call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &'static str,
    args: Value,
) -> anyhow::Result<Value> {
    let Value::Object(obj) = args else {
        anyhow::bail!("arguments of {tool} are not an object")
    };
    let r = client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(obj))
        .await?;
    anyhow::ensure!(r.is_error != Some(true), "{tool} failed: {:?}", r.content);
    Ok(r.structured_content.unwrap_or(Value::Null))
}

async fn run_async(ctx: &Ctx) -> anyhow::Result<Vec<Row>> {
    let dir = ctx.scratch.join("mcp");
    let src = dir.join("src");
    std::fs::create_dir_all(&src)?;
    std::fs::write(src.join("README"), b"bench\n")?;
    let store = strata_sdk::Store::create(dir.join("store")).await?;
    store.create_project_from("p", &src).await?;
    let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
    cmd.arg(MCP_ARG).arg(store.dir());
    let client = ().serve(TokioChildProcess::new(cmd)?).await?;
    let sb = call(&client, "sandbox_create", json!({})).await?["sandbox_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ws = call(
        &client,
        "workspace_mount",
        json!({"sandbox_id": sb, "branch": "p/main"}),
    )
    .await?["workspace_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let n = if ctx.quick { 50 } else { 200 };
    let run = json!({"workspace_id": ws, "argv": ["true"]});
    for _ in 0..10 {
        call(&client, "run", run.clone()).await?;
    }
    let (mut runs, mut statuses) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let t = Instant::now();
        let r = call(&client, "run", run.clone()).await?;
        runs.push(ms(t.elapsed()));
        anyhow::ensure!(r["exit_code"] == 0, "true ended with {r}");
        let t = Instant::now();
        call(&client, "status", json!({"workspace_id": ws})).await?;
        statuses.push(ms(t.elapsed()));
    }
    call(
        &client,
        "sandbox_close",
        json!({"sandbox_id": sb, "discard": true}),
    )
    .await?;
    client.cancel().await?;
    Ok(vec![
        Row::new(
            "mcp",
            &format!("MCP `run` of `true` through stdio, median of {n}"),
            "ms",
            median(runs),
        )
        .goal("(report)", true),
        Row::new(
            "mcp",
            &format!("MCP `status` through stdio, median of {n}"),
            "ms",
            median(statuses),
        )
        .goal("(report)", true),
    ])
}
