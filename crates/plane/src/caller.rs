//! Who acts on the plane, and which tenants they may act on.

use gatehouse_capability::Scope;

/// Who made a `/v1` call, as the audit log names them: a named caller,
/// `service` for the holder of the internal service token, `anonymous`
/// where authentication is explicitly off; and which tenants it acts on.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The caller's name.
    pub name: String,
    /// The tenants it may act on: `None` for every tenant (the service
    /// token, a named caller without `tenants`, authentication off).
    pub tenants: Option<std::sync::Arc<[String]>>,
    /// Whether it holds scope `admin`.
    pub admin: bool,
    /// A run's own grant as the credential: it acts on that run only.
    pub run_id: Option<std::sync::Arc<str>>,
}

impl Caller {
    /// A caller that acts on every tenant with every scope.
    pub fn unbound(name: &str) -> Self {
        Self { name: name.to_owned(), tenants: None, admin: true, run_id: None }
    }

    /// A run's sandbox, its grant as its credential: bound to the run's
    /// tenant (none: no tenant at all) and to the run.
    pub fn of_run(claims: &gatehouse_capability::GrantClaims) -> Self {
        Self {
            name: format!("run:{}", claims.exec_id),
            tenants: Some(claims.tenant_id.iter().cloned().collect::<Vec<_>>().into()),
            admin: false,
            run_id: Some(claims.exec_id.as_str().into()),
        }
    }

    /// Whether the caller may act on `run_id` as far as its run binding
    /// goes (a caller bound to no run: any run).
    pub fn may_act_on_run(&self, run_id: &str) -> bool {
        self.run_id.as_deref().is_none_or(|own| own == run_id)
    }

    /// A named caller as its caller file entry says.
    pub fn named(caller: &gatehouse_capability::CallerToken) -> Self {
        Self {
            name: caller.name().to_owned(),
            tenants: caller.tenants().map(std::sync::Arc::from),
            admin: caller.scopes().contains(&Scope::Admin),
            run_id: None,
        }
    }

    /// Whether the caller may act on `tenant`. The one rule: an unbound
    /// caller acts on every tenant (and on requests naming none); a bound
    /// caller only on its own tenants, never on a request naming none.
    pub fn may_act_on(&self, tenant: Option<&str>) -> bool {
        match (&self.tenants, tenant) {
            (None, _) => true,
            (Some(own), Some(tenant)) => own.iter().any(|t| t == tenant),
            (Some(_), None) => false,
        }
    }

    /// Whether the caller may act on every tenant at once (emergency
    /// revoke, revoking every grant, the whole audit log): unbound, with
    /// scope `admin`.
    pub fn acts_globally(&self) -> bool {
        self.tenants.is_none() && self.admin
    }
}
