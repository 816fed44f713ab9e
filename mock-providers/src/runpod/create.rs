//! `POST /v2/pods`: the body checked (schema, then the handler's rules), the GPU or CPU
//! flavor placed, the pod made.

use super::*;

pub(super) async fn create_pod(
    AxState(s): AxState<State>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let admission = match s.engine.gate(RouteKind::Create, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    admitted(create_inner(&s.engine, &body), &admission)
}

pub(super) fn create_inner(engine: &Engine, body: &[u8]) -> Response {
    let req = match validate::parse_create(body) {
        Ok(r) => r,
        Err(e) => return invalid(e),
    };
    if req.template_id.is_some() {
        return problem(StatusCode::NOT_FOUND, "template not found", Vec::new());
    }
    // The create table of v2 `POST /v2/pods`: 402 insufficient balance ("stop; no candidate
    // will succeed"), 403 "your account cannot access the requested pool".
    {
        let inner = engine.lock();
        if inner.runpod.balance_exhausted {
            return problem(
                StatusCode::PAYMENT_REQUIRED,
                "insufficient balance",
                Vec::new(),
            );
        }
        if let Some(g) = &req.gpu
            && inner.runpod.restricted_gpu_types.contains(&g.id)
        {
            return problem(StatusCode::FORBIDDEN, "access denied", Vec::new());
        }
    }
    let login = match req
        .registry
        .as_deref()
        .map(|id| registries::login(engine, id))
    {
        Some(Ok(l)) => Some(l),
        Some(Err(resp)) => return resp,
        None => None,
    };
    let command = command_line(req.image.as_deref().unwrap_or_default(), &req.args);
    let mut extra = PodExtra {
        args: req.args.clone(),
        disk: req.disk.unwrap_or(20),
        ports: req.ports,
        registry: req.registry,
        cloud: req.cloud,
        data_center_id: req
            .data_center_ids
            .first()
            .cloned()
            .unwrap_or_else(|| DEFAULT_DATA_CENTER.into()),
        vcpu_count: 0,
        memory_gb: 0,
        mounts: req.mounts.unwrap_or_else(|| json!({})),
        global_networking: req.global_networking,
        cpu_flavor: None,
    };
    let (gpu_type, gpu_count) = match req.gpu {
        Some(gpu) => {
            if let Err(resp) = check_gpu(engine, &gpu) {
                return resp;
            }
            let count = u64::from(gpu.count);
            // A GPU pod's vCPUs and RAM come with its GPUs (v2 has no field to ask for them):
            // the emulated machines give a fixed share per GPU.
            extra.vcpu_count = VCPUS_PER_GPU * count;
            extra.memory_gb = RAM_GB_PER_GPU * count;
            (gpu.id, gpu.count)
        }
        None => {
            let (flavor, vcpus, gb_per_vcpu) = match cpu_request(req.cpu.as_ref()) {
                Ok(c) => c,
                Err(resp) => return resp,
            };
            extra.vcpu_count = vcpus;
            extra.memory_gb = vcpus * gb_per_vcpu;
            extra.cpu_flavor = Some(flavor);
            (String::new(), 0)
        }
    };
    let new = NewWorkload {
        name: req.name,
        image: req.image.unwrap_or_default(),
        env: req.env,
        gpu_type,
        gpu_count,
        command,
        login,
        extra: Extra::RunPod(Box::new(extra)),
        ..NewWorkload::default()
    };
    let now = Instant::now();
    let seq = {
        let mut inner = engine.lock();
        match engine.create_locked(&mut inner, new, now) {
            Ok(seq) => {
                inner.gate.note_created();
                seq
            }
            Err(AllocError::NoCapacity { .. } | AllocError::UnknownType(_)) => {
                return problem(StatusCode::BAD_REQUEST, CAPACITY_DETAIL, Vec::new());
            }
        }
    };
    match pod_json(engine, seq) {
        Some(pod) => json_response(StatusCode::CREATED, pod),
        None => pod_not_found(),
    }
}

/// A GPU request the inventory can place: a known type, an acceptable CUDA version.
pub(super) fn check_gpu(engine: &Engine, gpu: &GpuRequest) -> Result<(), Response> {
    if engine.lock().inventory.get(&gpu.id).is_none() {
        let msg = format!("unknown GPU type '{}'", gpu.id);
        return Err(problem(
            StatusCode::BAD_REQUEST,
            msg.clone(),
            vec![format!("$.gpu.id: {msg}")],
        ));
    }
    let cuda_ok = (gpu.allowed_cuda_versions.is_empty()
        || gpu.allowed_cuda_versions.iter().any(|v| v == CUDA_VERSION))
        && gpu
            .min_cuda_version
            .as_deref()
            .is_none_or(|floor| validate::cuda_at_least(CUDA_VERSION, floor));
    if !cuda_ok {
        return Err(problem(
            StatusCode::BAD_REQUEST,
            CAPACITY_DETAIL,
            Vec::new(),
        ));
    }
    Ok(())
}

/// The CPU pod a schema-valid `cpu` block asks for: flavor, vCPUs and GB per vCPU. The
/// handler rules of `BaseCpuConfig`: a known flavor and a power-of-two `vcpuCount` (400).
pub(super) fn cpu_request(cpu: Option<&Value>) -> Result<(String, u64, u64), Response> {
    let cpu = cpu.ok_or_else(|| {
        problem(
            StatusCode::BAD_REQUEST,
            "exactly one of gpu or cpu must be set",
            Vec::new(),
        )
    })?;
    let id = cpu.get("id").and_then(Value::as_str).unwrap_or_default();
    let vcpus = cpu.get("vcpuCount").and_then(Value::as_u64).unwrap_or(0);
    let Some((_, gb)) = CPU_FLAVORS.iter().find(|(f, _)| *f == id) else {
        return Err(problem(
            StatusCode::BAD_REQUEST,
            format!("unknown CPU flavor '{id}'"),
            Vec::new(),
        ));
    };
    if vcpus < 2 || !vcpus.is_power_of_two() || vcpus > 64 {
        return Err(problem(
            StatusCode::BAD_REQUEST,
            format!(
                "vcpuCount {vcpus} is not valid for CPU flavor {id}: a power of two from 2 to 64"
            ),
            Vec::new(),
        ));
    }
    Ok((id.to_owned(), vcpus, *gb))
}
