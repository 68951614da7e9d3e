//! callgate-prove: Cedar policy properties checked over every request by cedar-policy-symcc.
//!
//! Reads one JSON job on stdin (docs/PROVE.md, "The prover process"), writes one JSON line per
//! check on stdout as each finishes (flushed), so the caller's wall-clock bound can report the
//! checks it did not get as unknown. The caller (callgate/prove/) turns properties into checks:
//! this process knows Cedar and callgate's reading of a policy set (enforcing vs @shadow, @confirm
//! permits), not the properties file.
//!
//! A set is read in one of three *views* of callgate's decision (callgate/policy/engines/cedar.py):
//!
//! * `admitted`: ALLOW or CONFIRM = Cedar's Allow on the enforcing policies;
//! * `allowed`: ALLOW without confirmation = Cedar's Allow once every @confirm permit is read as a
//!   forbid (any satisfied @confirm permit turns callgate's answer into CONFIRM);
//! * `confirmed`: CONFIRM = Cedar's Allow on the @confirm permits and the forbids.
//!
//! A scope (a Cedar condition) is a `forbid ... unless { scope }` added to the set, so the set
//! allows nothing outside it. Exit status: 0 when every check ran (whatever its answer), 2 on a
//! malformed job, 3 when the solver cannot be started.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::str::FromStr;

use cedar_policy::{ActionConstraint, Effect, EntityUid, Policy, PolicyId, PolicySet, RequestEnv, Schema};
use cedar_policy_symcc::solver::LocalSolver;
use cedar_policy_symcc::{CedarSymCompiler, CompiledPolicy, CompiledPolicySet, Env};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize)]
struct Job {
    schema: String,
    #[serde(default = "default_timeout")]
    solver_timeout_ms: u64,
    checks: Vec<Check>,
}

fn default_timeout() -> u64 {
    10_000
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Kind {
    AlwaysDenies,
    NeverErrors,
    Implies,
    Equivalent,
    Disjoint,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum View {
    Admitted,
    Allowed,
    Confirmed,
}

#[derive(Deserialize)]
struct SetSpec {
    text: String,
    view: View,
    #[serde(default)]
    include_shadow: bool,
    #[serde(default)]
    shadow_ids: Vec<String>,
}

#[derive(Deserialize)]
struct Check {
    name: String,
    kind: Kind,
    set: SetSpec,
    #[serde(default)]
    other: Option<SetSpec>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    actions: Option<Vec<String>>,
}

enum Outcome {
    Proved,
    Refuted(Value),
    Unknown(String),
    Error(String),
}

fn policy_label(p: &Policy) -> String {
    p.annotation("id").map(str::to_string).unwrap_or_else(|| p.id().to_string())
}

/// Sets already read in their view, by (text, view, shadow): a job's checks often share one set
/// (ListTools by policy asks one question per principal class and action of the same snapshot),
/// and parsing it again per check cost more than the check.
type SetCache = HashMap<(String, u8, bool, Vec<String>), PolicySet>;

/// The policies of `spec` in its view, plus the scope's forbid.
fn build_set(spec: &SetSpec, scope: Option<&str>, cache: &mut SetCache) -> Result<PolicySet, String> {
    let key = (spec.text.clone(), spec.view as u8, spec.include_shadow, spec.shadow_ids.clone());
    let mut out = match cache.get(&key) {
        Some(set) => set.clone(),
        None => {
            let set = view_set(spec)?;
            cache.insert(key, set.clone());
            set
        }
    };
    if let Some(scope) = scope {
        let text = format!("@id(\"scope\")\nforbid (principal, action, resource) unless {{ {scope} }};");
        let p = Policy::parse(Some(PolicyId::new("scope")), text)
            .map_err(|e| format!("the scope does not parse as a Cedar condition: {e}"))?;
        out.add(p).map_err(|e| format!("scope: {e}"))?;
    }
    Ok(out)
}

/// The policies of `spec` in its view.
fn view_set(spec: &SetSpec) -> Result<PolicySet, String> {
    let parsed = PolicySet::from_str(&spec.text).map_err(|e| format!("policies do not parse: {e}"))?;
    let shadow: HashSet<&str> = spec.shadow_ids.iter().map(String::as_str).collect();
    let mut out = PolicySet::new();
    for (n, p) in parsed.policies().enumerate() {
        let label = policy_label(p);
        let is_shadow = p.annotation("shadow").is_some() || shadow.contains(label.as_str());
        if is_shadow && !spec.include_shadow {
            continue;
        }
        let confirm = p.effect() == Effect::Permit && p.annotation("confirm").is_some();
        let keep = match (spec.view, p.effect(), confirm) {
            (_, Effect::Forbid, _) => Some(false),
            (View::Admitted, Effect::Permit, _) => Some(false),
            (View::Allowed, Effect::Permit, false) => Some(false),
            (View::Allowed, Effect::Permit, true) => Some(true), // read as a forbid
            (View::Confirmed, Effect::Permit, true) => Some(false),
            (View::Confirmed, Effect::Permit, false) => None,
        };
        let Some(as_forbid) = keep else { continue };
        let id = PolicyId::new(format!("p{n}"));
        let policy = if as_forbid {
            let mut est = p.to_json().map_err(|e| format!("policy {label}: {e}"))?;
            est["effect"] = json!("forbid");
            Policy::from_json(Some(id), est).map_err(|e| format!("policy {label}: {e}"))?
        } else {
            p.new_id(id)
        };
        out.add(policy).map_err(|e| format!("policy {label}: {e}"))?;
    }
    Ok(out)
}

fn uid_json(uid: &EntityUid) -> Value {
    json!({"type": uid.type_name().to_string(), "id": uid.id().unescaped()})
}

fn counterexample(env: &Env, policy: Option<String>) -> Value {
    let r = &env.request;
    let context = r.context().and_then(|c| c.to_json_value().ok()).unwrap_or(Value::Null);
    let entities = env.entities.to_json_value().unwrap_or(Value::Null);
    json!({
        "principal": r.principal().map(uid_json),
        "action": r.action().map(uid_json),
        "resource": r.resource().map(uid_json),
        "context": context,
        "entities": entities,
        "policy": policy,
    })
}

fn action_name(env: &RequestEnv) -> String {
    env.action().id().unescaped().to_string()
}

type Compiler = CedarSymCompiler<LocalSolver>;

fn new_compiler(timeout_ms: u64) -> Result<Compiler, String> {
    let solver = LocalSolver::cvc5_with_args([format!("--tlimit-per={timeout_ms}")])
        .map_err(|e| format!("cannot start the solver named by CVC5: {e}"))?;
    CedarSymCompiler::new(solver).map_err(|e| e.to_string())
}

/// One answer of the symbolic compiler for one request environment.
fn answer(r: Result<Option<Env>, cedar_policy_symcc::err::Error>, policy: Option<String>) -> Outcome {
    use cedar_policy_symcc::err::Error;
    match r {
        Ok(None) => Outcome::Proved,
        Ok(Some(env)) => Outcome::Refuted(counterexample(&env, policy)),
        Err(Error::SolverUnknown) => Outcome::Unknown("the solver answered unknown (time limit)".into()),
        Err(Error::SolverError(e)) => Outcome::Unknown(format!("solver: {e}")),
        Err(e @ (Error::DecodeModel(_) | Error::ConcretizeError(_) | Error::ModelInvalid { .. })) => {
            // the solver says a counterexample exists but it could not be read back: not proved
            Outcome::Unknown(format!("a counterexample could not be read back: {e}"))
        }
        Err(Error::PolicyNotWellTyped { errs }) => {
            let why: Vec<String> = errs.iter().map(ToString::to_string).collect();
            Outcome::Error(format!("not well typed against the schema: {}", why.join("; ")))
        }
        Err(e) => Outcome::Error(e.to_string()),
    }
}

/// The policies of `set` that can apply to `env`'s action: a policy whose scope is
/// `action == <another action>` matches no request of this environment, so leaving it out changes
/// no answer and spares its compilation (a set of 1,000 policies over 100 actions compiles ten per
/// action, not 1,000). `action in [...]` (action groups) and unconstrained actions stay.
fn slice(set: &PolicySet, env: &RequestEnv) -> PolicySet {
    let mut out = PolicySet::new();
    for p in set.policies() {
        if let ActionConstraint::Eq(uid) = p.action_constraint() {
            if &uid != env.action() {
                continue;
            }
        }
        let _ = out.add(p.clone());
    }
    out
}

async fn run_env(
    c: &mut Compiler,
    check: &Check,
    schema: &Schema,
    env: &RequestEnv,
    set: &PolicySet,
    other: Option<&PolicySet>,
) -> Outcome {
    let set = &slice(set, env);
    let other = other.map(|o| slice(o, env));
    let other = other.as_ref();
    let compile = |s: &PolicySet| CompiledPolicySet::compile(s, env, schema).map_err(|e| e.to_string());
    let a = match compile(set) {
        Ok(a) => a,
        Err(e) => return Outcome::Error(format!("{}: {e}", action_name(env))),
    };
    match check.kind {
        Kind::AlwaysDenies => answer(c.check_always_denies_with_counterexample_opt(&a).await, None),
        Kind::NeverErrors => {
            for p in set.policies() {
                if p.id().to_string() == "scope" {
                    continue;
                }
                let cp = match CompiledPolicy::compile(p, env, schema) {
                    Ok(cp) => cp,
                    Err(e) => return Outcome::Error(format!("{}: {e}", action_name(env))),
                };
                let out = answer(c.check_never_errors_with_counterexample_opt(&cp).await, Some(policy_label(p)));
                if !matches!(out, Outcome::Proved) {
                    return out;
                }
            }
            Outcome::Proved
        }
        Kind::Implies | Kind::Equivalent | Kind::Disjoint => {
            let Some(other) = other else {
                return Outcome::Error("this kind needs a second set".into());
            };
            let b = match compile(other) {
                Ok(b) => b,
                Err(e) => return Outcome::Error(format!("{}: {e}", action_name(env))),
            };
            let r = match check.kind {
                Kind::Implies => c.check_implies_with_counterexample_opt(&a, &b).await,
                Kind::Equivalent => c.check_equivalent_with_counterexample_opt(&a, &b).await,
                _ => c.check_disjoint_with_counterexample_opt(&a, &b).await,
            };
            answer(r, None)
        }
    }
}

async fn run_check(c: &mut Compiler, schema: &Schema, check: &Check, cache: &mut SetCache) -> Outcome {
    let scope = check.scope.as_deref();
    let set = match build_set(&check.set, scope, cache) {
        Ok(s) => s,
        Err(e) => return Outcome::Error(e),
    };
    let other = match &check.other {
        Some(o) => match build_set(o, scope, cache) {
            Ok(s) => Some(s),
            Err(e) => return Outcome::Error(format!("the other set: {e}")),
        },
        None => None,
    };
    let wanted: Option<HashSet<&str>> = check.actions.as_ref().map(|a| a.iter().map(String::as_str).collect());
    let mut unknown: Option<String> = None;
    let mut seen = 0usize;
    // in action order: the same counterexample for the same files, whatever the schema's hashing
    let mut envs: Vec<RequestEnv> = schema.request_envs().collect();
    envs.sort_by_key(|e| (action_name(e), e.principal().to_string(), e.resource().to_string()));
    for env in envs {
        let name = action_name(&env);
        if let Some(w) = &wanted {
            if !w.contains(name.as_str()) {
                continue;
            }
        }
        seen += 1;
        match run_env(c, check, schema, &env, &set, other.as_ref()).await {
            Outcome::Proved => {}
            Outcome::Unknown(why) => unknown = Some(format!("{name}: {why}")),
            decided => return decided,
        }
    }
    if let Some(w) = &wanted {
        if seen < w.len() {
            let known: HashSet<String> = schema.request_envs().map(|e| action_name(&e)).collect();
            let mut missing: Vec<&str> = w.iter().copied().filter(|a| !known.contains(*a)).collect();
            missing.sort_unstable();
            if !missing.is_empty() {
                return Outcome::Error(format!("actions not in the schema: {}", missing.join(", ")));
            }
        }
    }
    match unknown {
        Some(why) => Outcome::Unknown(why),
        None => Outcome::Proved,
    }
}

fn emit(out: &mut impl Write, name: &str, outcome: &Outcome) {
    let line = match outcome {
        Outcome::Proved => json!({"name": name, "status": "proved"}),
        Outcome::Refuted(cex) => json!({"name": name, "status": "refuted", "counterexample": cex}),
        Outcome::Unknown(why) => json!({"name": name, "status": "unknown", "detail": why}),
        Outcome::Error(why) => json!({"name": name, "status": "error", "detail": why}),
    };
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut input = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("callgate-prove: cannot read the job: {e}");
        std::process::exit(2);
    }
    let job: Job = match serde_json::from_str(&input) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("callgate-prove: malformed job: {e}");
            std::process::exit(2);
        }
    };
    let schema = match Schema::from_cedarschema_str(&job.schema) {
        Ok((s, _)) => s,
        Err(e) => {
            eprintln!("callgate-prove: the schema does not parse: {e}");
            std::process::exit(2);
        }
    };
    let mut compiler = match new_compiler(job.solver_timeout_ms) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("callgate-prove: {e}");
            std::process::exit(3);
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut cache = SetCache::new();
    for check in &job.checks {
        let outcome = run_check(&mut compiler, &schema, check, &mut cache).await;
        emit(&mut out, &check.name, &outcome);
        if let Outcome::Unknown(_) = outcome {
            // a solver that timed out or failed may be mid-answer: the next check gets a fresh one
            match new_compiler(job.solver_timeout_ms) {
                Ok(c) => compiler = c,
                Err(e) => {
                    eprintln!("callgate-prove: {e}");
                    std::process::exit(3);
                }
            }
        }
    }
}
