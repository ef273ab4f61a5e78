//! One object of every resource kube-apiserver 1.35 stores (tests/data/kube-apiserver-1.35): the
//! value it wrote to etcd, read by watchcache's built-in definition of the resource, is what
//! kube-apiserver serves for it, byte for byte, in JSON and in protobuf. This covers every
//! built-in kind's message, and the kinds stored as another type (events.k8s.io Events stored as
//! core Events, VolumeAttributesClasses in v1beta1, CustomResourceDefinitions as v1beta1 JSON).

use watchcache::{Cache, CacheConfig, ResourceDef};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/kube-apiserver-1.35/"
);

struct Vector {
    name: String,
    key: String,
    rv: u64,
}

fn vectors() -> Vec<Vector> {
    std::fs::read_to_string(format!("{DIR}objects.txt"))
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Vector {
                name: f[0].to_owned(),
                key: f[1].to_owned(),
                rv: f[3].parse().unwrap(),
            }
        })
        .collect()
}

fn read(name: &str, ext: &str) -> Vec<u8> {
    std::fs::read(format!("{DIR}{name}.{ext}")).unwrap()
}

#[test]
fn every_built_in_resource_has_its_object() {
    let names: Vec<String> = vectors().into_iter().map(|v| v.name).collect();
    for def in ResourceDef::builtins() {
        if def.group == "example.com" {
            continue;
        }
        assert!(
            names.contains(&def.resource_name()),
            "no object for {}",
            def.resource_name()
        );
    }
}

/// Fields kube-apiserver's decoder fills in by defaulting when it reads the object from etcd
/// (design/semantics.md, "Storage versions and defaults"): a PersistentVolumeClaim's
/// `status.phase` (Pending) and a Job's `metadata.labels` (its template's) before anything
/// writes them. watchcache serves what is stored; everything else must be equal.
const READ_DEFAULTS: &[(&str, &[&str])] = &[
    ("persistentvolumeclaims", &["status", "phase"]),
    ("jobs.batch", &["metadata", "labels"]),
];

#[test]
fn what_kube_apiserver_stored_reads_as_what_it_serves() {
    let mut failures = Vec::new();
    for v in vectors() {
        // `NAME-more` is another object of resource NAME.
        let resource = v.name.split('-').next().unwrap_or_default();
        let def =
            ResourceDef::builtin(resource).unwrap_or_else(|| panic!("{}: no definition", v.name));
        let (cache, _) = Cache::new(def, CacheConfig::default());
        let obj = match cache.decode(&v.key, &read(&v.name, "etcd.bin"), v.rv) {
            Ok(o) => o,
            Err(e) => {
                failures.push(format!("{}: {e}", v.name));
                continue;
            }
        };
        let json = read(&v.name, "json");
        let want = json.strip_suffix(b"\n").unwrap_or(&json);
        if let Some((_, path)) = READ_DEFAULTS.iter().find(|(n, _)| *n == v.name) {
            // Equal but for the defaulted field, which the stored value lacks.
            let mut want: serde_json::Value = serde_json::from_slice(want).unwrap();
            let got: serde_json::Value = serde_json::from_slice(obj.json()).unwrap();
            let (parent, leaf) = path.split_at(path.len() - 1);
            let holder = parent.iter().fold(&mut want, |v, k| &mut v[*k]);
            assert!(
                holder.as_object_mut().unwrap().remove(leaf[0]).is_some(),
                "{}",
                v.name
            );
            assert!(
                parent
                    .iter()
                    .fold(&got, |v, k| &v[*k])
                    .get(leaf[0])
                    .is_none(),
                "{}",
                v.name
            );
            assert_eq!(got, want, "{}", v.name);
            continue;
        }
        if obj.json().as_ref() != want {
            failures.push(format!(
                "{}: JSON differs\n got {}\nwant {}",
                v.name,
                String::from_utf8_lossy(obj.json()),
                String::from_utf8_lossy(want)
            ));
        }
        match obj.protobuf_wire() {
            Ok(pb) if pb.as_ref() == read(&v.name, "pb").as_slice() => {}
            Ok(_) => failures.push(format!("{}: protobuf differs", v.name)),
            Err(e) => failures.push(format!("{}: protobuf: {e}", v.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

use crate::support::cut;

/// `drop=metadata.managedFields` (KEP-5958) on every object kube-apiserver wrote: what is served
/// without managed fields is kube-apiserver's answer with the member cut out (JSON) and
/// `ObjectMeta`'s field 17 left out (protobuf), byte for byte. Prints the bytes saved per object.
#[test]
fn every_object_without_managed_fields_is_upstreams_answer_without_them() {
    let mut failures = Vec::new();
    let (mut json_total, mut json_saved, mut pb_total, mut pb_saved) = (0, 0, 0, 0);
    for v in vectors() {
        let resource = v.name.split('-').next().unwrap_or_default();
        if READ_DEFAULTS.iter().any(|(n, _)| *n == v.name) {
            continue;
        }
        let (cache, _writer) = Cache::new(
            ResourceDef::builtin(resource).unwrap(),
            CacheConfig::default(),
        );
        let obj = cache
            .decode(&v.key, &read(&v.name, "etcd.bin"), v.rv)
            .unwrap();
        let json = String::from_utf8(read(&v.name, "json")).unwrap();
        let want = cut::cut_json(json.trim_end());
        let got = watchcache::managed_fields::json_without(obj.json())
            .unwrap()
            .unwrap_or_else(|| obj.json().to_vec());
        if got != want.as_bytes() {
            failures.push(format!(
                "{}: JSON\n got {}\nwant {want}",
                v.name,
                String::from_utf8_lossy(&got)
            ));
        }
        let pb = read(&v.name, "pb");
        let want_pb = cut::cut_protobuf(&pb);
        let wire = obj.protobuf_wire().unwrap();
        let got_pb = watchcache::managed_fields::protobuf_without(wire)
            .unwrap()
            .unwrap_or_else(|| wire.to_vec());
        if got_pb != want_pb {
            failures.push(format!("{}: protobuf differs", v.name));
        }
        let (j, p) = (json.trim_end().len(), pb.len());
        println!(
            "{:<60} JSON {j:>6} -> {:>6} ({:>4.1} %)   protobuf {p:>6} -> {:>6} ({:>4.1} %)",
            v.name,
            want.len(),
            100.0 * (j - want.len()) as f64 / j as f64,
            want_pb.len(),
            100.0 * (p - want_pb.len()) as f64 / p as f64,
        );
        json_total += j;
        json_saved += j - want.len();
        pb_total += p;
        pb_saved += p - want_pb.len();
    }
    println!(
        "all: JSON {json_total} B, {json_saved} B without managed fields ({:.1} %); protobuf {pb_total} B, {pb_saved} B ({:.1} %)",
        100.0 * json_saved as f64 / json_total as f64,
        100.0 * pb_saved as f64 / pb_total as f64
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
