#!/bin/sh
# Regenerates aws.txt and gcp.txt from the providers' published lists.
# Needs curl and jq; run by hand on a host with Internet access, then
# `rctl check rules/` and commit.
set -eu
cd "$(dirname "$0")"
{
  echo "# Amazon Web Services, from https://ip-ranges.amazonaws.com/ip-ranges.json ($(date -u +%F))"
  curl -fsS https://ip-ranges.amazonaws.com/ip-ranges.json |
    jq -r '.prefixes[].ip_prefix, .ipv6_prefixes[].ipv6_prefix' | sort -u
} > aws.txt
{
  echo "# Google Cloud, from https://www.gstatic.com/ipranges/cloud.json ($(date -u +%F))"
  curl -fsS https://www.gstatic.com/ipranges/cloud.json |
    jq -r '.prefixes[] | .ipv4Prefix // .ipv6Prefix' | sort -u
} > gcp.txt
