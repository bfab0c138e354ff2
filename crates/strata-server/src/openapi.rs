//! The OpenAPI 3.1 document, generated from the routes' annotations and
//! the wire types (utoipa), served at `/v1/openapi.json` and checked in as
//! docs/api/server-openapi.json (a test compares the two).

use std::sync::OnceLock;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::*;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let c = doc.components.get_or_insert_with(Default::default);
        c.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("A token from `strata token create`"))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "strata serve",
        description = "One authenticated HTTP/JSON API for a strata Store (docs/server.md). Every route but /v1/healthz needs `Authorization: Bearer TOKEN`. Errors are `{\"error\": {\"code\", \"message\"}}`. Under /v1/sandboxes/{id}/ every route of the Sandbox daemon's own API (docs/api/openapi.yaml: workspaces, execs and their output, stdin, resize, cancel, wait, health, logs) is relayed as it is, with the daemon's shapes and errors; GET /v1/sandboxes/{id}/execs/{eid}/output?format=ndjson answers OutputLine lines instead of the daemon's frames.",
        license(name = "Apache-2.0")
    ),
    paths(
        crate::routes::healthz,
        crate::routes::openapi_json,
        crate::routes::list_projects,
        crate::routes::create_project,
        crate::routes::list_branches,
        crate::routes::create_branch,
        crate::routes::delete_branch,
        crate::routes::log,
        crate::routes::diff,
        crate::routes::ls,
        crate::routes::stat,
        crate::routes::cat,
        crate::write::commit,
        crate::tarball::export,
        crate::tarball::import,
        crate::sandboxes::create,
        crate::sandboxes::list,
        crate::sandboxes::get,
        crate::sandboxes::logs,
        crate::sandboxes::restart,
        crate::sandboxes::close,
        crate::relay::ws,
    ),
    components(schemas(
        ErrorBody, ErrorDetail, Healthz, ProjectList, CreateProject, Project, Branch,
        BranchList, CreateBranch, CommitInfo, LogResponse, PathChange, DiffResponse, Entry,
        LsResponse, Change, ChangeSet, CommitResponse, CreateSandbox, SandboxNetwork,
        SandboxState, SandboxWorkspace, SandboxInfo, SandboxList, ExecExit, ExecFailed,
        OutputLine, WsControl
    )),
    modifiers(&Bearer),
    security(("bearer" = []))
)]
pub struct ApiDoc;

/// The document as served and checked in: pretty JSON and a newline.
pub fn document() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut s = ApiDoc::openapi()
            .to_pretty_json()
            .expect("the OpenAPI document serializes");
        s.push('\n');
        s
    })
}
