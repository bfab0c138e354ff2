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

/// What the annotations cannot say, said once for every route: a project
/// or branch in the path is a name (`[a-z0-9][a-z0-9._-]{0,62}`, no "..",
/// as strata-store's `validate_name` checks; anything else is a 400), and
/// a change names no field its operation does not have (the server refuses
/// unknown fields with 422; utoipa does not carry serde's
/// `deny_unknown_fields` into an internally tagged enum's variants).
/// Schemathesis checks both (crates/strata-cli/tests/serve_schemathesis.rs).
struct Constraints;

/// The rule of project and branch names, as a regular expression.
pub const NAME_PATTERN: &str = r"^(?!.*\.\.)[a-z0-9][a-z0-9._-]{0,62}$";

impl Modify for Constraints {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::ParameterIn;
        use utoipa::openapi::schema::{AdditionalProperties, Schema};
        use utoipa::openapi::RefOr;
        for item in doc.paths.paths.values_mut() {
            let ops = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in ops.into_iter().flatten() {
                for p in op.parameters.iter_mut().flatten() {
                    let is_name = matches!(p.name.as_str(), "project" | "branch");
                    if !is_name || !matches!(p.parameter_in, ParameterIn::Path) {
                        continue;
                    }
                    if let Some(RefOr::T(Schema::Object(o))) = p.schema.as_mut() {
                        o.pattern = Some(NAME_PATTERN.to_string());
                    }
                }
            }
        }
        let Some(c) = doc.components.as_mut() else {
            return;
        };
        if let Some(RefOr::T(Schema::OneOf(one))) = c.schemas.get_mut("Change") {
            for v in one.items.iter_mut() {
                if let RefOr::T(Schema::Object(o)) = v {
                    o.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
                }
            }
        }
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
    modifiers(&Bearer, &Constraints),
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
